"""Dialing for probes and lifecycle hooks (pkg/probe ProbeDialer upstream).

A probe's or hook's target is chosen by the pod's author, so nothing here is
shared in a way that one pod can use up:
- an IP needs no lookup; a host name is resolved on a thread of its own, at
  most one lookup per pod at a time. A lookup outlives a probe that gave up on
  it (getaddrinfo cannot be cancelled): that pod's next lookup waits for the
  thread, no other pod's does, and no shared executor is involved;
- at most PER_POD_CONNECTIONS probe and hook connections per pod at a time
  (PodSlots): the kubelet's descriptors (RLIMIT_NOFILE, 20,000 on these
  machines) are shared by every pod, and a pod with hundreds of containers
  whose endpoints never answer would otherwise hold one per probe;
- sockets close the ordinary way. Upstream's dialer sets SO_LINGER to 1 s
  against TIME-WAIT build-up, but a lingering close() blocks the calling
  thread until the peer acknowledges, and here that thread is the event loop:
  an endpoint that stalls its ACKs would stall every pod. TIME-WAIT entries
  are per (source port, pod IP, port), so a probe per second per endpoint
  leaves about 60 of them, far from the ephemeral port range.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from collections.abc import AsyncIterator

LookupResult = list[tuple[int, str]] | BaseException
PER_POD_CONNECTIONS = 64


class LookupError_(OSError):
    """A host name that did not resolve (Go: "lookup <host>: <reason>")."""


def join_host_port(host: str, port: int) -> str:
    """host:port with an IPv6 address in brackets (Go's net.JoinHostPort)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def ip_family(host: str) -> int | None:
    """AF_INET / AF_INET6 for an IP literal, None for a name."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    return socket.AF_INET6 if ip.version == 6 else socket.AF_INET


def probe_socket(family: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


def _lookup(host: str, port: int) -> LookupResult:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as err:  # IDNA errors are UnicodeError
        return err
    return [(fam, str(addr[0])) for fam, _t, _p, _c, addr in infos]


class Resolver:
    """Host names to addresses, one lookup per owner (pod UID) at a time."""

    def __init__(self) -> None:
        # owner -> the lookup running for it (done when its thread ends)
        self._running: dict[str, asyncio.Future[LookupResult]] = {}

    def busy(self) -> int:
        """Lookups whose thread still runs."""
        return len(self._running)

    async def resolve(self, owner: str, host: str, port: int) -> tuple[int, str]:
        """(family, address) to dial for host; raises OSError when it does not resolve."""
        fam = ip_family(host)
        if fam is not None:
            return fam, host
        while (prev := self._running.get(owner)) is not None:
            await asyncio.shield(prev)  # this pod's previous lookup, even if abandoned
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[LookupResult] = loop.create_future()
        self._running[owner] = fut

        def done(result: LookupResult) -> None:
            if self._running.get(owner) is fut:
                del self._running[owner]
            if not fut.done():
                fut.set_result(result)

        def work() -> None:
            result = _lookup(host, port)
            try:
                loop.call_soon_threadsafe(done, result)
            except RuntimeError:
                pass  # the loop is gone: nobody waits any more

        threading.Thread(target=work, name="probe-lookup", daemon=True).start()
        result = await asyncio.shield(fut)
        if isinstance(result, BaseException):
            raise LookupError_(f"lookup {host}: {result}")
        if not result:
            raise LookupError_(f"lookup {host}: no such host")
        return result[0]


class PodSlots:
    """At most `limit` connections in flight per owner (pod UID); a probe waits
    for a slot within its own timeout. Entries live only while in use."""

    def __init__(self, limit: int = PER_POD_CONNECTIONS) -> None:
        self.limit = limit
        self._slots: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    def in_use(self) -> int:
        return len(self._slots)

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        entry = self._slots.get(owner)
        if entry is None:
            entry = self._slots[owner] = (asyncio.Semaphore(self.limit), [0])
        sem, users = entry
        users[0] += 1
        try:
            async with sem:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._slots[owner]
