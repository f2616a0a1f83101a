"""One pod's probes cannot starve another pod's (issue 27).

A hostile pod points 200 HTTP readiness probes at a port that accepts and never
answers, half of them through a host name whose lookup hangs; 50 other pods
probe a healthy server, half by IP and half by a host name. None of the 50 may
fail a probe or run late by more than one period; the hostile pod's lookups
may hold at most one thread and its probes at most PER_POD_CONNECTIONS sockets.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from aiohttp import web

from kubelet.probe.dial import PER_POD_CONNECTIONS
from tests.integration.core.test_probes import c, record

HOSTILE = 200
VICTIMS = 50
PERIOD = 2  # the victims' periodSeconds
WINDOW = 12.0  # seconds of probing watched once every victim is ready
SLOW_NAME = "hang.slow.test"
GOOD_NAME = "healthy.test"


class SlowDNS:
    """socket.getaddrinfo where SLOW_NAME hangs for 5 s (a resolver that does not
    answer) and GOOD_NAME is 127.0.0.1; other names go to the real resolver."""

    def __init__(self) -> None:
        self.real = socket.getaddrinfo
        self.lock = threading.Lock()
        self.slow_now = 0
        self.slow_max = 0

    def __call__(self, host: Any, port: Any, *args: Any, **kw: Any) -> Any:
        if host == GOOD_NAME:
            return self.real("127.0.0.1", port, *args, **kw)
        if host != SLOW_NAME:
            return self.real(host, port, *args, **kw)
        with self.lock:
            self.slow_now += 1
            self.slow_max = max(self.slow_max, self.slow_now)
        try:
            time.sleep(5)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        finally:
            with self.lock:
                self.slow_now -= 1


async def _silent_server(port: int) -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    held: list[asyncio.StreamWriter] = []

    async def hold(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)  # accepted, never answered

    server = await asyncio.start_server(hold, "127.0.0.1", port, backlog=1024)
    return server, held


async def _healthy_server(port: int, hits: dict[str, list[float]]) -> web.AppRunner:
    async def handler(request: web.Request) -> web.Response:
        hits.setdefault(request.path, []).append(time.monotonic())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def _connections_to(port: int) -> int:
    """This process's established TCP connections to 127.0.0.1:port (client side)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return sum(1 for r in rows if r[2] == want and r[3] == "01")


async def _watch_connections(port: int, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], _connections_to(port))
        await asyncio.sleep(0.2)


def _probe(host: str, port: int, path: str, period: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"host": host, "port": port, "path": path},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": 1000,
    }


def _write_hostile(node: Any, hang_port: int) -> None:
    containers = []
    for i in range(HOSTILE):
        host = SLOW_NAME if i % 2 else "127.0.0.1"
        containers.append(c(f"h{i}", readinessProbe=_probe(host, hang_port, f"/h{i}", 1, 10)))
    node.write("hostile", containers)


def _write_victims(node: Any, ok_port: int) -> None:
    for i in range(VICTIMS):
        host = GOOD_NAME if i % 2 else "127.0.0.1"
        node.write(f"ok{i}", [c("app", readinessProbe=_probe(host, ok_port, f"/ok{i}", PERIOD, 1))])


async def test_hanging_probes_of_one_pod_do_not_starve_other_pods(  # type: ignore[no-untyped-def]
    node, unused_tcp_port_factory, monkeypatch
) -> None:
    dns = SlowDNS()
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    rec = record(node)
    hang_port, ok_port = unused_tcp_port_factory(), unused_tcp_port_factory()
    hits: dict[str, list[float]] = {}
    silent, held = await _silent_server(hang_port)
    healthy = await _healthy_server(ok_port, hits)
    try:
        _write_hostile(node, hang_port)
        # The attack is under way: the silent port holds as many connections as one pod may.
        await node.wait(
            lambda: len(held) >= PER_POD_CONNECTIONS, timeout=90, what="hostile probes connected"
        )
        peak = [0]
        watcher = asyncio.create_task(_watch_connections(hang_port, peak))
        _write_victims(node, ok_port)
        await node.wait(
            lambda: all(node.container(f"ok{i}", "app")["ready"] for i in range(VICTIMS)),
            timeout=60,
            what="every victim pod ready while the hostile pod's probes hang",
        )
        start = time.monotonic()
        await asyncio.sleep(WINDOW)
        end = time.monotonic()
        watcher.cancel()

        not_ready = [i for i in range(VICTIMS) if not node.container(f"ok{i}", "app")["ready"]]
        assert not not_ready, f"victim pods lost readiness: {not_ready}"
        failed = [(n, m) for n, _t, r, m in rec.events if r == "Unhealthy" and n.startswith("ok")]
        assert not failed, f"victim probes failed: {failed[:5]}"
        late = {}
        for i in range(VICTIMS):
            times = [t for t in hits.get(f"/ok{i}", []) if t >= start - PERIOD]
            gaps = [b - a for a, b in zip([start, *times], [*times, end], strict=True)]
            if max(gaps) > 2 * PERIOD:
                late[i] = round(max(gaps), 2)
        assert not late, f"victim probes ran late by more than one period: {late}"
        # The hostile pod's probes did run (and fail), and its hanging lookups
        # never held more than the one thread a pod may have.
        assert any(r == "Unhealthy" and n.startswith("hostile") for n, _t, r, _m in rec.events)
        assert dns.slow_max == 1, f"one pod held {dns.slow_max} lookup threads"
        assert 0 < peak[0] <= PER_POD_CONNECTIONS, f"one pod held {peak[0]} connections"
    finally:
        for w in held:
            w.close()
        silent.close()
        await healthy.cleanup()
