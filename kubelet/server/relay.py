"""The byte relay of exec, attach and port-forward, on a thread of its own.

One thread per proxied connection dials the runtime's streaming server, sends the
upgrade request, reads the answer, and once the event loop has handed it the
client's connection carries bytes both ways until both ends are done. The event
loop only waits for two futures: it never sees a byte of the stream, so a busy
exec cannot delay the PLEG, the probes or the status manager.

The client's TLS session (the kubelet port is TLS) is driven here through the
SSLObject and memory BIOs the event loop's TLS protocol negotiated it with (see
`tls_server_protocol`): OpenSSL releases the GIL while it encrypts, and the socket
calls release it while they wait. One thread serves both directions, so no lock
is needed around the SSLObject, which OpenSSL does not allow two threads to use.

What the loop's relay did, this one does the same way: a peer that does not read
stops reading on the other side (back-pressure, 1 MiB per direction); an EOF is
passed on as a half-close where the other end is plain TCP and ends both where
it is TLS; a connection that carried no byte either way for the idle timeout is
closed; whatever is still buffered at the end gets CLOSE_GRACE seconds to leave.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

log = logging.getLogger(__name__)

CHUNK = 256 * 1024
WRITE_HIGH = 1024 * 1024  # per direction: past this, the other side is not read
MAX_HEAD = 64 * 1024  # an upgrade answer's status line and headers
ANSWER_TIMEOUT = 30.0  # dial, TLS and the runtime's upgrade answer
ERROR_BODY_WAIT = 2.0  # a refusal's body is read for this long at most
CLOSE_GRACE = 10.0  # a side still flushing this long after the end is dropped
LINGER = 5.0  # a TLS client's answer to close_notify is awaited this long
_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL


@dataclass
class TLSState:
    """A TLS session negotiated elsewhere, carried on over memory BIOs."""

    obj: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO


class Endpoint:
    """One end of the relay: a socket, plain or TLS, and what waits to go out.

    Reads land in a buffer of the endpoint's own; what is written is sent at
    once and only what the socket does not take is copied into `out`."""

    def __init__(self, sock: socket.socket, tls: TLSState | None = None) -> None:
        self.sock = sock
        self.tls = tls
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)
        self.out = bytearray()  # bytes for the socket (ciphertext under TLS)
        self.eof_in = False  # nothing more comes from this side
        self.want_shut = False  # half-close this side once `out` is sent
        self.shut = False
        self.lost = False  # reset, or an error: nothing more goes either way
        self.starved = False  # the last read found nothing ready

    def buffered(self) -> bool:
        """Whether plaintext may be readable without the socket being ready."""
        t = self.tls
        return t is not None and (t.incoming.pending > 0 or t.obj.pending() > 0)

    def read(self) -> memoryview | None:
        """Plaintext from this side, valid until the next read: empty at its end,
        None when none is ready. Raises OSError (ssl.SSLError) if it broke."""
        n = self._read()
        self.starved = n is None
        return None if n is None else self.view[:n]

    def _read(self) -> int | None:
        if self.tls is None:
            try:
                return self.sock.recv_into(self.buf)
            except (BlockingIOError, InterruptedError):
                return None
        t = self.tls
        got = 0
        while got < CHUNK:
            try:
                # With a buffer, read() returns a count (the stubs say bytes).
                n = cast(int, t.obj.read(CHUNK - got, self.view[got:]))
                if n == 0:
                    return got  # the peer's close_notify (0 once the data is out)
                got += n
                continue
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return got
            if got:
                break  # deliver what there is before waiting on the socket
            try:
                raw = self.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                return None
            if raw:
                t.incoming.write(raw)
            else:
                t.incoming.write_eof()  # the next read ends the session
        self._take_tls_output()  # a key update or an alert to answer
        return got

    def queue(self, data: memoryview | bytes) -> None:
        """Send `data` (encrypted under TLS), keeping what the socket does not take.
        A broken socket marks the endpoint lost instead of raising."""
        if self.tls is None:
            self._send_or_keep(data)
        else:
            self.tls.obj.write(data)
            self._take_tls_output()

    def _take_tls_output(self) -> None:
        assert self.tls is not None
        if self.tls.outgoing.pending:
            self._send_or_keep(self.tls.outgoing.read())

    def _send_or_keep(self, data: memoryview | bytes) -> None:
        if self.lost:
            return
        if not self.out:
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self.lost = True
                return
            if n == len(data):
                return
            data = data[n:]
        self.out += data

    def flush(self) -> None:
        """Send what the socket takes now; half-close when asked and all is sent."""
        while self.out:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            del self.out[:n]
        if self.want_shut and not self.shut:
            self.shut = True
            self.sock.shutdown(socket.SHUT_WR)

    def close(self, linger: float = 0.0) -> None:
        """Close the socket. A TLS side that is still sound says close_notify first
        and, for `linger` seconds at most, waits for the peer's before closing, as
        asyncio's TLS shutdown does: some clients (uvloop's) drop what they have
        not read yet when the TCP end comes right behind the close_notify."""
        if self.tls is not None and not self.lost:
            deadline = time.monotonic() + linger
            try:
                self.sock.settimeout(linger if linger > 0 else 0.0)
                while True:
                    try:
                        self.tls.obj.unwrap()  # done once the peer's close_notify is in
                        break
                    except ssl.SSLWantReadError:
                        pass
                    self._take_tls_output()
                    self.flush()
                    if (left := deadline - time.monotonic()) <= 0:
                        break
                    self.sock.settimeout(left)
                    data = self.sock.recv(CHUNK)
                    if not data:
                        break
                    self.tls.incoming.write(data)
                self._take_tls_output()
                self.flush()
            except (OSError, ssl.SSLError):
                pass  # gone or broken: nothing more to say
        self.sock.close()


@dataclass
class Answer:
    """The runtime's answer to the upgrade, or why there is none."""

    error: str = ""  # the text of a 500 the kubelet answers itself
    head: bytes = b""  # the status line, headers and whatever came after them
    status: int = 0


@dataclass
class _Target:
    host: str
    port: int
    tls: bool
    request: bytes


def status_of(head: bytes) -> int:
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) < 2 or not line[0].startswith(b"HTTP/") or not line[1].isdigit():
        raise ValueError(f"malformed response status line {head[:80]!r}")
    return int(line[1])


def content_length(head: bytes) -> int | None:
    for line in head.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length" and v.strip().isdigit():
            return int(v.strip())
    return None


@dataclass
class Relay:
    """One proxied connection. The event loop calls `start`, awaits `answer`,
    then `attach`es the client and awaits `done`; `abort` from the loop at any
    time ends it."""

    host: str
    port: int
    tls: bool  # the runtime's streaming URL is https
    request: bytes  # the upgrade request for the runtime, as sent
    idle_timeout: float
    answer: asyncio.Future[Answer] = field(init=False)
    done: asyncio.Future[None] = field(init=False)

    def __post_init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.answer = self._loop.create_future()
        self.done = self._loop.create_future()
        self._lock = threading.Lock()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._aborted = False
        self._backend: socket.socket | None = None
        self._client: Endpoint | None = None
        self._first: tuple[bytes, bytes] = (b"", b"")  # to the client, to the runtime

    # ------------------------------------------------------------ event loop side
    def start(self) -> None:
        _WORKERS.submit(self._main)

    def attach(self, client: Endpoint, to_client: bytes, to_runtime: bytes) -> None:
        """Hand over the client's connection: `to_client` (the runtime's answer)
        goes out first, `to_runtime` is what the client sent after its request."""
        with self._lock:
            if self._wake < 0:  # the thread has ended (it failed): nothing will carry it
                client.sock.close()
                return
            self._client, self._first = client, (to_client, to_runtime)
            self._poke()

    def abort(self) -> None:
        """End now: sockets closed without a flush (the loop's handler was cancelled)."""
        with self._lock:
            self._aborted = True
            if self._backend is not None and self._wake >= 0:
                try:  # wakes a blocking dial or read
                    self._backend.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._poke()

    def _poke(self) -> None:
        if self._wake >= 0:
            os.eventfd_write(self._wake, 1)

    def _post(self, fut: asyncio.Future[Answer] | asyncio.Future[None], value: object) -> None:
        def set_it() -> None:
            if not fut.done():
                fut.set_result(value)  # type: ignore[arg-type]  # callers pair each future with its own kind of value

        try:
            self._loop.call_soon_threadsafe(set_it)
        except RuntimeError:  # the loop is closed: the kubelet is exiting
            pass

    # ------------------------------------------------------------ relay thread
    def _main(self) -> None:
        backend: Endpoint | None = None
        client: Endpoint | None = None
        try:
            backend, answer = self._dial()
            self._post(self.answer, answer)
            if backend is not None and answer.status == 101:
                client = self._wait_for_client()
                if client is not None:
                    self._relay(client, backend)
        except Exception:  # a bug here must not leave the loop's handler waiting
            log.exception("Streaming relay failed")
            self._post(self.answer, Answer(error="streaming relay failed"))
        finally:
            with self._lock:
                client = self._client  # attached, though perhaps never relayed
                linger = 0.0 if self._aborted else LINGER
            for ep in (client, backend):
                if ep is not None:
                    try:
                        ep.close(linger)
                    except OSError:
                        pass
            with self._lock:
                os.close(self._wake)
                self._wake = -1
            self._post(self.done, None)

    def _dial(self) -> tuple[Endpoint | None, Answer]:
        """Connect, send the upgrade request, read the answer (and a refusal's body)."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        try:
            sock = socket.create_connection((self.host, self.port), timeout=ANSWER_TIMEOUT)
        except OSError as err:
            return None, Answer(error=f"dial tcp {self.host}:{self.port}: {err}")
        with self._lock:
            self._backend = sock
            aborted = self._aborted
        ep = Endpoint(sock)
        if aborted:
            return ep, Answer(error="aborted")
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                ep.tls = _client_handshake(sock, self.host, deadline)
            ep.queue(self.request)
            ep.flush()
            head = _read_head(ep, deadline)
            status = status_of(head)
        except (OSError, ValueError) as err:  # TimeoutError and SSLError are OSErrors
            return ep, Answer(error=f"error reading the runtime's upgrade response: {err}")
        if status >= 400:  # upstream echoes a refusal with its body
            head = _read_body(ep, head, time.monotonic() + ERROR_BODY_WAIT)
        return ep, Answer(head=head, status=status)

    def _wait_for_client(self) -> Endpoint | None:
        poller = select.poll()
        poller.register(self._wake, select.POLLIN)
        while True:
            with self._lock:
                if self._aborted:
                    return None
                if self._client is not None:
                    return self._client
            poller.poll()
            _drain_eventfd(self._wake)

    def _relay(self, client: Endpoint, backend: Endpoint) -> None:
        to_client, to_runtime = self._first
        client.sock.setblocking(False)
        backend.sock.setblocking(False)
        client.queue(to_client)
        if to_runtime:
            backend.queue(to_runtime)
        _Pump(client, backend, self._wake, self.idle_timeout, self._is_aborted).run()

    def _is_aborted(self) -> bool:
        return self._aborted


class _Workers:
    """Daemon threads that run relays, kept when idle (up to KEEP_IDLE) so that a
    new exec seldom starts a thread: Thread.start() waits until the new thread
    runs, which on a loaded node is a wait the event loop would make."""

    KEEP_IDLE = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = 0
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # that worker's next get() is this one
                self._queue.put(fn)
                return
        threading.Thread(target=self._work, args=(fn,), name="stream-relay", daemon=True).start()

    def _work(self, fn: Callable[[], None]) -> None:
        while True:
            fn()
            with self._lock:
                if self._idle >= self.KEEP_IDLE:
                    return
                self._idle += 1
            fn = self._queue.get()


_WORKERS = _Workers()


class _Pump:
    """The two-way copy: one poll() over both sockets and the wake-up eventfd."""

    def __init__(
        self, a: Endpoint, b: Endpoint, wake: int, idle: float, aborted: Callable[[], bool]
    ) -> None:
        self.a, self.b = a, b
        self.wake = wake
        self.idle = idle
        self.aborted = aborted
        self.last = time.monotonic()
        self.closing_at: float | None = None
        self.poller = select.poll()
        self.poller.register(wake, select.POLLIN)
        self.events: dict[int, int] = {}

    def peer(self, ep: Endpoint) -> Endpoint:
        return self.b if ep is self.a else self.a

    def close_soon(self) -> None:
        if self.closing_at is None:
            self.closing_at = time.monotonic()

    def run(self) -> None:
        sides = (self.a, self.b)
        while not self.aborted():
            for src in sides:
                self._move(src, self.peer(src))
            if self.a.eof_in and self.b.eof_in:
                self.close_soon()
            if self.closing_at is not None:
                pending = any(s.out and not s.lost for s in sides)
                if not pending or time.monotonic() > self.closing_at + CLOSE_GRACE:
                    return
            self._wait()

    def _readable(self, src: Endpoint) -> bool:
        dst = self.peer(src)
        return (
            self.closing_at is None
            and not src.eof_in
            and not src.lost
            and len(dst.out) < WRITE_HIGH
        )

    def _move(self, src: Endpoint, dst: Endpoint) -> None:
        try:
            while self._readable(src):
                data = src.read()
                if data is None:
                    break
                self.last = time.monotonic()
                if not data:
                    src.eof_in = True
                    if dst.tls is None:
                        dst.want_shut = True  # half-close: the other way keeps flowing
                    else:
                        self.close_soon()  # TLS here cannot half-close: end both
                    break
                dst.queue(data)
                if dst.lost:
                    break
        except OSError:  # ssl.SSLError is one
            self._lose(src)
        if dst.lost:
            self._lose(dst)
        else:
            try:
                dst.flush()
            except OSError:
                self._lose(dst)

    def _lose(self, ep: Endpoint) -> None:
        ep.lost = True
        ep.out.clear()
        self.close_soon()

    def _wait(self) -> None:
        timeout: float | None = None
        now = time.monotonic()
        if self.closing_at is not None:
            timeout = self.closing_at + CLOSE_GRACE - now
        elif self.idle > 0:
            timeout = self.last + self.idle - now
            if timeout <= 0:
                log.info("Closing a streaming connection idle for %.0fs", self.idle)
                self.close_soon()
                return
        watch: dict[int, Endpoint] = {}
        for s in (self.a, self.b):
            ev = 0
            if self._readable(s):
                if s.buffered() and not s.starved:
                    timeout = 0
                ev |= select.POLLIN
            if s.out and not s.lost:
                ev |= select.POLLOUT
            fd = s.sock.fileno()
            if ev != self.events.get(fd):
                if ev:
                    self.poller.register(fd, ev)  # register() also modifies
                elif fd in self.events:
                    self.poller.unregister(fd)
                self.events[fd] = ev
            if ev:
                watch[fd] = s
        ready = self.poller.poll(None if timeout is None else max(0, int(timeout * 1000) + 1))
        for fd, rev in ready:
            if fd == self.wake:
                _drain_eventfd(self.wake)
            elif rev & _HANGUP and not rev & (select.POLLIN | select.POLLOUT) and fd in watch:
                self._lose(watch[fd])


def _drain_eventfd(fd: int) -> None:
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def _client_handshake(sock: socket.socket, host: str, deadline: float) -> TLSState:
    """TLS to the runtime's https streaming server, verified as any https client."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=host)
    t = TLSState(obj, incoming, outgoing)
    while True:
        try:
            t.obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            pass
        if t.outgoing.pending:
            sock.sendall(t.outgoing.read())
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        data = sock.recv(CHUNK)
        if not data:
            raise ConnectionResetError("connection closed during the TLS handshake")
        t.incoming.write(data)
    if t.outgoing.pending:
        sock.sendall(t.outgoing.read())
    return t


def _recv_until(ep: Endpoint, deadline: float) -> bytes:
    """One blocking read of plaintext before `deadline` (b"" at EOF)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    ep.sock.settimeout(left)
    data = ep.read()
    return b"" if data is None else bytes(data)


def _read_head(ep: Endpoint, deadline: float) -> bytes:
    head = bytearray()
    while b"\r\n\r\n" not in head:
        if len(head) > MAX_HEAD:
            raise ValueError("upgrade response headers too large")
        data = _recv_until(ep, deadline)
        if not data:
            raise ConnectionResetError("connection closed")
        head += data
    return bytes(head)


def _read_body(ep: Endpoint, head: bytes, deadline: float) -> bytes:
    """The rest of a refusal: Content-Length bytes, or to EOF, within the deadline."""
    want = content_length(head)
    buf = bytearray(head)
    try:
        while want is None or len(buf.partition(b"\r\n\r\n")[2]) < want:
            data = _recv_until(ep, deadline)
            if not data:
                break
            buf += data
    except OSError:
        pass  # what came is what is echoed
    return bytes(buf)
