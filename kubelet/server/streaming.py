"""exec, attach and port-forward on the kubelet port (server.go getExec/getAttach/
getPortForward and proxyStream upstream).

The kubelet asks the runtime (CRI Exec/Attach/PortForward) for the URL of the
runtime's own streaming server and proxies the client's upgraded connection to
it, as upstream does by default: it sends the upgrade request on, relays the
backend's answer as it came, and from then on carries bytes both ways without
reading the frames (SPDY/3.1 or WebSocket, whichever the client asked for).

The relay is two asyncio protocols wired to each other's transports, so data
never waits in a coroutine: a full write buffer on one side pauses reading on
the other (back-pressure), an EOF is passed on as a half-close where the
transport can (not TLS), and a connection idle for streamingConnectionIdleTimeout
in both directions is closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

import grpc
from aiohttp import web

from kubelet.cri import errors as cri_errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import labels

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024  # an upgrade answer's status line and headers
WRITE_HIGH = 1024 * 1024
CLOSE_GRACE = 10.0  # a side still flushing this long after the other closed is aborted
# Request headers not sent on to the runtime: its streaming server authenticates by
# the one-time token in the URL, so the client's credentials stay here.
_DROP = {b"authorization", b"proxy-authorization"}


class StreamError(Exception):
    """A request the kubelet answers itself, before any upgrade."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def grpc_code_name(code: grpc.StatusCode) -> str:
    return "".join(w.capitalize() for w in code.name.split("_"))


def cri_stream_error(err: cri_errors.CRIError) -> StreamError:
    """An error from the runtime as upstream's streaming.WriteError answers it."""
    status = {grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.RESOURCE_EXHAUSTED: 429}
    text = f"rpc error: code = {grpc_code_name(err.code)} desc = {err.message}"
    return StreamError(status.get(err.code, 500), text)


# ---------------------------------------------------------------- options
def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name) == "1"


def stream_options(request: web.Request) -> tuple[bool, bool, bool, bool]:
    """(stdin, stdout, stderr, tty) as remotecommand NewOptions reads them."""
    tty = _flag(request, "tty")
    stdin, stdout = _flag(request, "input"), _flag(request, "output")
    stderr = _flag(request, "error") and not tty  # a TTY has no separate stderr
    if not (stdin or stdout or stderr):
        raise StreamError(400, "you must specify at least 1 of stdin, stdout, stderr")
    return stdin, stdout, stderr, tty


def is_websocket(request: web.Request) -> bool:
    conn = ",".join(request.headers.getall("Connection", [])).lower()
    return "upgrade" in conn and request.headers.get("Upgrade", "").lower() == "websocket"


def port_options(request: web.Request) -> list[int]:
    """The ports of a WebSocket port-forward (SPDY names them per stream later)."""
    if not is_websocket(request):
        return []
    values = request.query.getall("port", [])
    if not values:
        raise StreamError(400, 'query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise StreamError(400, 'query parameter "port" cannot be empty')
        for p in value.split(","):
            try:
                port = int(p)
                if not 0 <= port <= 65535 or not p.isdigit():
                    raise ValueError(p)
            except ValueError:
                raise StreamError(400, f'unable to parse "{value}" as a port') from None
            if port < 1:
                raise StreamError(400, f'port "{value}" must be > 0')
            ports.append(port)
    return ports


# ---------------------------------------------------------------- runtime lookups
async def running_container(rt: RuntimeService, pod_uid: str, container: str) -> str | None:
    """The running container of that name in the pod (upstream looks only at running ones)."""
    items = await rt.list_containers(
        pb.ContainerFilter(
            state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING),
            label_selector={labels.POD_UID: pod_uid},
        )
    )
    found = [c for c in items if c.labels.get(labels.CONTAINER_NAME) == container]
    if not found:
        return None
    return str(max(found, key=lambda c: c.created_at).id)


async def ready_sandbox(rt: RuntimeService, pod_uid: str) -> str | None:
    items = await rt.list_pod_sandbox(
        pb.PodSandboxFilter(
            state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY),
            label_selector={labels.POD_UID: pod_uid},
        )
    )
    if not items:
        return None
    return str(max(items, key=lambda s: s.created_at).id)


async def exec_url(
    rt: RuntimeService, pod: dict[str, Any], container: str, cmd: list[str],
    opts: tuple[bool, bool, bool, bool],
) -> str:  # fmt: skip
    stdin, stdout, stderr, tty = opts
    cid = await running_container(rt, str(pod["metadata"]["uid"]), container)
    if cid is None:
        raise StreamError(500, f'container not found ("{container}")')
    try:
        return await rt.exec(cid, cmd, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
    except cri_errors.CRIError as err:
        raise cri_stream_error(err) from None


async def attach_url(
    rt: RuntimeService, pod: dict[str, Any], uid_in_path: str, container: str,
    opts: tuple[bool, bool, bool, bool],
) -> str:  # fmt: skip
    stdin, stdout, stderr, _ = opts
    meta = pod["metadata"]
    full_name = f"{meta['name']}_{meta.get('namespace') or 'default'}"
    cid = await running_container(rt, str(meta["uid"]), container)
    if cid is None:
        raise StreamError(500, f"container {container} not found in pod {full_name}")
    if uid_in_path and uid_in_path != meta["uid"]:
        raise StreamError(500, f"pod {full_name} not found")
    spec = next(
        (c for kind in ("containers", "initContainers", "ephemeralContainers")
         for c in pod["spec"].get(kind) or [] if c.get("name") == container),
        None,
    )  # fmt: skip
    if spec is None:
        raise StreamError(500, f"container {container} not found in pod {full_name}")
    # Whether the process has a TTY was fixed when it started: the spec says, not the client.
    tty = bool(spec.get("tty"))
    try:
        return await rt.attach(cid, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
    except cri_errors.CRIError as err:
        raise cri_stream_error(err) from None


async def port_forward_url(rt: RuntimeService, pod: dict[str, Any], ports: list[int]) -> str:
    meta = pod["metadata"]
    sid = await ready_sandbox(rt, str(meta["uid"]))
    if sid is None:
        full_name = f"{meta['name']}_{meta.get('namespace') or 'default'}"
        raise StreamError(500, f'pod not found ("{full_name}")')
    try:
        return await rt.port_forward(sid, ports)
    except cri_errors.CRIError as err:
        raise cri_stream_error(err) from None


# ---------------------------------------------------------------- the relay
class _Pipe:
    """Both sides of one proxied connection, its idle timer and its end."""

    def __init__(self, idle_timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.idle_timeout = idle_timeout
        self.last = self.loop.time()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.sides: list[_Side] = []
        self._timer: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self.closing = False

    def start_idle_timer(self) -> None:
        if self.idle_timeout > 0:
            self._timer = self.loop.call_at(self.last + self.idle_timeout, self._check_idle)

    def _check_idle(self) -> None:
        due = self.last + self.idle_timeout
        if self.loop.time() >= due:
            log.info("Closing a streaming connection idle for %.0fs", self.idle_timeout)
            self.close()
        else:
            self._timer = self.loop.call_at(due, self._check_idle)

    def close(self) -> None:
        """Close both sides; whatever they still hold is flushed for CLOSE_GRACE at most."""
        if self.closing:
            return
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        for s in self.sides:
            if s.transport is not None and not s.lost:
                s.transport.close()
        self._grace = self.loop.call_later(CLOSE_GRACE, self.abort)

    def abort(self) -> None:
        for s in self.sides:
            if s.transport is not None and not s.lost:
                s.transport.abort()

    def side_lost(self) -> None:
        if all(s.lost for s in self.sides):
            if self._grace is not None:
                self._grace.cancel()
            if self._timer is not None:
                self._timer.cancel()
            if not self.done.done():
                self.done.set_result(None)
        else:
            self.close()


class _Side(asyncio.Protocol):
    """One end of the relay: what it reads goes to the peer's transport."""

    def __init__(self, pipe: _Pipe, on_lost: Callable[[Exception | None], None] | None) -> None:
        self.pipe = pipe
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False
        self.lost = False
        self._on_lost = on_lost
        # Until the backend's answer to the upgrade is complete, what it sends is kept here.
        self.head: bytearray | None = None
        self.head_done: asyncio.Future[bytes] | None = None
        pipe.sides.append(self)

    # -- setup
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def expect_head(self) -> None:
        self.head = bytearray()
        self.head_done = self.pipe.loop.create_future()

    # -- data
    def data_received(self, data: bytes) -> None:
        self.pipe.last = self.pipe.loop.time()
        if self.head is not None:
            self._head_data(data)
            return
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.lost:
            peer.transport.write(data)

    def _head_data(self, data: bytes) -> None:
        assert self.head is not None and self.head_done is not None
        self.head += data
        if self.head_done.done():
            return  # the relay takes over the buffer when it starts
        if b"\r\n\r\n" in self.head:
            self.head_done.set_result(b"")
            if self.transport is not None:
                self.transport.pause_reading()  # until the relay starts
        elif len(self.head) > MAX_HEAD:
            self.head_done.set_exception(ValueError("upgrade response headers too large"))

    def start_relay(self) -> bytes:
        """Leave handshake mode; returns what came after the handshake head."""
        assert self.head is not None
        head, self.head = bytes(self.head), None
        if self.transport is not None and not self.lost:
            self.transport.resume_reading()
        return head

    def eof_received(self) -> bool:
        self.pipe.last = self.pipe.loop.time()
        self.eof = True
        if self.head_done is not None and not self.head_done.done():
            self.head_done.set_exception(ConnectionResetError("connection closed"))
        peer = self.peer
        if peer is None or peer.transport is None or peer.lost or peer.eof:
            return False  # nothing left to carry: close
        if peer.transport.can_write_eof():
            peer.transport.write_eof()  # half-close: the other way keeps flowing
            return True
        return False  # the peer (TLS) cannot half-close: end both

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        if self.head_done is not None and not self.head_done.done():
            self.head_done.set_exception(exc or ConnectionResetError("connection closed"))
        if self._on_lost is not None:
            cb, self._on_lost = self._on_lost, None
            cb(exc if isinstance(exc, Exception) else None)
        self.pipe.side_lost()

    # -- back-pressure: a full write buffer here stops reading on the other side
    def pause_writing(self) -> None:
        self._peer_reading(False)

    def resume_writing(self) -> None:
        self._peer_reading(True)

    def _peer_reading(self, on: bool) -> None:
        peer = self.peer
        if peer is None or peer.transport is None or peer.lost:
            return
        try:
            if on:
                peer.transport.resume_reading()
            else:
                peer.transport.pause_reading()
        except (RuntimeError, AttributeError):  # closing under us
            pass


def _upgrade_requested(request: web.Request) -> bool:
    conn = ",".join(request.headers.getall("Connection", []))
    return any(t.strip().lower() == "upgrade" for t in conn.split(","))


def _backend_request(request: web.Request, path_qs: str) -> bytes:
    lines = [f"{request.method} {path_qs} HTTP/1.1".encode()]
    forwarded = False
    peer = request.remote or ""
    for k, v in request.raw_headers:
        lk = k.lower()
        if lk in _DROP:
            continue
        if lk == b"x-forwarded-for" and peer:
            v = v + b", " + peer.encode()
            forwarded = True
        lines.append(k + b": " + v)
    if not forwarded and peer:
        lines.append(b"X-Forwarded-For: " + peer.encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _status_of(head: bytes) -> int:
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) < 2 or not line[0].startswith(b"HTTP/") or not line[1].isdigit():
        raise ValueError(f"malformed response status line {head[:80]!r}")
    return int(line[1])


def _content_length(head: bytes) -> int | None:
    for line in head.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length" and v.strip().isdigit():
            return int(v.strip())
    return None


def _error_response(head: bytes) -> web.Response:
    """Echo a backend's refusal (status >= 400) to the client, as upstream does."""
    header_part, _, body = head.partition(b"\r\n\r\n")
    status = _status_of(head)
    ctype = "text/plain"
    for line in header_part.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-type":
            ctype = v.strip().decode("latin-1")
    resp = web.Response(status=status, body=body)
    resp.headers["Content-Type"] = ctype
    return resp


def plain_error(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text)


async def proxy_stream(request: web.Request, url: str, idle_timeout: float) -> web.StreamResponse:
    """Carry the client's upgraded connection to the runtime's streaming URL."""
    # Upstream's proxy answers every failure of its own with 500 and the error text.
    if not _upgrade_requested(request):
        return plain_error(500, "Upgrade request required")
    target = urlsplit(url)
    if target.scheme not in ("http", "https") or not target.hostname:
        return plain_error(500, f"unknown scheme: {target.scheme}")
    client_transport = request.transport
    if client_transport is None:
        return plain_error(500, "client connection is gone")
    loop = asyncio.get_running_loop()
    pipe = _Pipe(idle_timeout)
    backend = _Side(pipe, None)
    backend.expect_head()
    port = target.port or (443 if target.scheme == "https" else 80)
    ctx = ssl.create_default_context() if target.scheme == "https" else None
    try:
        await loop.create_connection(lambda: backend, target.hostname, port, ssl=ctx)
    except OSError as err:
        pipe.sides.clear()
        return plain_error(500, f"dial tcp {target.hostname}:{port}: {err}")
    assert backend.transport is not None and backend.head_done is not None
    path_qs = (target.path or "/") + (f"?{target.query}" if target.query else "")
    backend.transport.write(_backend_request(request, path_qs))
    try:
        await asyncio.wait_for(backend.head_done, 30.0)
        status = _status_of(bytes(backend.head or b""))
    except asyncio.CancelledError:
        backend.transport.abort()
        raise
    except (OSError, ValueError) as err:  # TimeoutError is an OSError
        backend.transport.abort()
        return plain_error(500, f"error reading the runtime's upgrade response: {err}")
    if status != 101:
        if status < 400:
            backend.transport.abort()
            return plain_error(500, f"invalid upgrade response: status code {status}")
        # Upstream echoes the refusal with its body: read it (Content-Length, or to EOF).
        want = _content_length(bytes(backend.head or b""))
        backend.transport.resume_reading()
        deadline = loop.time() + 2.0
        while not backend.lost and not backend.eof and loop.time() < deadline:
            head, _, body = bytes(backend.head or b"").partition(b"\r\n\r\n")
            if want is not None and len(body) >= want:
                break
            await asyncio.sleep(0.01)
        head = bytes(backend.head or b"")
        backend.transport.abort()
        return _error_response(head)

    if client_transport.is_closing():  # the client left while the runtime answered
        backend.transport.abort()
        return plain_error(500, "client connection is gone")
    # Take the client's connection from aiohttp; its handler hears of the end
    # through connection_lost, as for any closed connection.
    aio_protocol = client_transport.get_protocol()
    client = _Side(pipe, aio_protocol.connection_lost)
    client.transport = client_transport
    client.peer, backend.peer = backend, client
    early = _take_buffered(request)
    client_transport.set_protocol(client)
    head = backend.start_relay()
    client_transport.write(head)  # the runtime's 101 and anything after it, as sent
    if early:
        backend.transport.write(early)
    # Larger buffers than asyncio's 64 KiB: fewer pause/resume rounds per MB moved.
    for t in (client_transport, backend.transport):
        t.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_HIGH // 4)
    pipe.start_idle_timer()
    try:
        await asyncio.shield(pipe.done)
    except asyncio.CancelledError:
        pipe.abort()
        raise
    # The connection is closed: aiohttp finds nothing to write this answer to.
    return web.Response(status=101)


class _Collector:
    """Takes what aiohttp buffered after the upgrade request (set_parser's contract)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.data += data
        return False, b""

    def feed_eof(self) -> None:
        pass


def _take_buffered(request: web.Request) -> bytes:
    proto: Any = request.protocol
    collector = _Collector()
    try:
        proto.set_parser(collector)
    except (AttributeError, AssertionError):  # not upgraded by aiohttp: nothing buffered
        return b""
    return bytes(collector.data)
