"""exec, attach and port-forward on the kubelet port (server.go getExec/getAttach/
getPortForward and proxyStream upstream).

The kubelet asks the runtime (CRI Exec/Attach/PortForward) for the URL of the
runtime's own streaming server and proxies the client's upgraded connection to
it, as upstream does by default: it sends the upgrade request on, relays the
backend's answer as it came, and from then on carries bytes both ways without
reading the frames (SPDY/3.1 or WebSocket, whichever the client asked for).

The bytes never touch the event loop: a thread per connection (kubelet/server/
relay.py) dials the runtime, and once its upgrade answer is in, the loop hands
that thread the client's socket and TLS session and only waits for the end.
Back-pressure, half-close and streamingConnectionIdleTimeout are the thread's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any
from urllib.parse import urlsplit

import grpc
from aiohttp import web

from kubelet.cri import errors as cri_errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import labels
from kubelet.server import relay
from kubelet.server.tlsproto import tls_protocol_of
from kubelet.types import Pod, all_containers

log = logging.getLogger(__name__)

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
    rt: RuntimeService, pod: Pod, container: str, cmd: list[str],
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
    rt: RuntimeService, pod: Pod, uid_in_path: str, container: str,
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
    spec = next((c for c in all_containers(pod) if c.get("name") == container), None)
    if spec is None:
        raise StreamError(500, f"container {container} not found in pod {full_name}")
    # Whether the process has a TTY was fixed when it started: the spec says, not the client.
    tty = bool(spec.get("tty"))
    try:
        return await rt.attach(cid, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
    except cri_errors.CRIError as err:
        raise cri_stream_error(err) from None


async def port_forward_url(rt: RuntimeService, pod: Pod, ports: list[int]) -> str:
    meta = pod["metadata"]
    sid = await ready_sandbox(rt, str(meta["uid"]))
    if sid is None:
        full_name = f"{meta['name']}_{meta.get('namespace') or 'default'}"
        raise StreamError(500, f'pod not found ("{full_name}")')
    try:
        return await rt.port_forward(sid, ports)
    except cri_errors.CRIError as err:
        raise cri_stream_error(err) from None


# ---------------------------------------------------------------- the handover
class _Inert(asyncio.Protocol):
    """What a transport reports to once its socket belongs to a relay thread."""


async def _take_client(request: web.Request) -> relay.Endpoint:
    """Take the client's connection (socket and TLS session) from the event loop.

    Reading stops, what the kubelet wrote is let out, then the socket is
    duplicated and the loop's transport closed over its own descriptor: the
    connection lives on in the duplicate. Raises ConnectionError if the client
    left meanwhile."""
    app_transport = request.transport
    if app_transport is None or app_transport.is_closing():
        raise ConnectionResetError("client connection is gone")
    tls_proto = tls_protocol_of(app_transport)
    raw = tls_proto.transport if tls_proto is not None else app_transport
    raw.pause_reading()
    deadline = asyncio.get_running_loop().time() + relay.CLOSE_GRACE
    while raw.get_write_buffer_size() or (tls_proto is not None and tls_proto.backlog()):
        if raw.is_closing() or asyncio.get_running_loop().time() > deadline:
            raise ConnectionResetError("client connection is gone")
        await asyncio.sleep(0.005)
    if raw.is_closing():
        raise ConnectionResetError("client connection is gone")
    tls = tls_proto.detach() if tls_proto is not None else None
    raw.set_protocol(_Inert())
    sock = socket.socket(fileno=os.dup(raw.get_extra_info("socket").fileno()))
    raw.abort()
    return relay.Endpoint(sock, tls)


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


def _error_response(head: bytes) -> web.Response:
    """Echo a backend's refusal (status >= 400) to the client, as upstream does."""
    header_part, _, body = head.partition(b"\r\n\r\n")
    status = relay.status_of(head)
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
    if request.transport is None:
        return plain_error(500, "client connection is gone")
    path_qs = (target.path or "/") + (f"?{target.query}" if target.query else "")
    port = target.port or (443 if target.scheme == "https" else 80)
    pipe = relay.Relay(target.hostname, port, target.scheme == "https",
                       _backend_request(request, path_qs), idle_timeout)  # fmt: skip
    pipe.start()
    try:
        answer = await pipe.answer
    except asyncio.CancelledError:
        pipe.abort()
        raise
    if answer.error:
        return plain_error(500, answer.error)
    if answer.status != 101:
        if answer.status < 400:
            return plain_error(500, f"invalid upgrade response: status code {answer.status}")
        return _error_response(answer.head)  # upstream echoes the refusal
    if request.transport is None or request.transport.is_closing():
        pipe.abort()  # the client left while the runtime answered
        return plain_error(500, "client connection is gone")
    aio_protocol = request.transport.get_protocol()
    early = _take_buffered(request)
    try:
        client = await _take_client(request)
    except ConnectionError:
        pipe.abort()
        return plain_error(500, "client connection is gone")
    except asyncio.CancelledError:
        pipe.abort()
        raise
    # The runtime's 101 and anything after it go to the client as sent; what the
    # client sent after its request goes to the runtime.
    pipe.attach(client, answer.head, bytes(early.data))
    try:
        await asyncio.shield(pipe.done)
    except asyncio.CancelledError:
        pipe.abort()
        raise
    finally:
        # aiohttp hears of the end as for any closed connection.
        aio_protocol.connection_lost(None)
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


def _take_buffered(request: web.Request) -> _Collector:
    """From now on what aiohttp reads on this connection lands in the collector."""
    proto: Any = request.protocol
    collector = _Collector()
    try:
        proto.set_parser(collector)
    except (AttributeError, AssertionError):  # not upgraded by aiohttp: nothing buffered
        pass
    return collector
