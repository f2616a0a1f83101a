"""exec/attach/portForward/run/runningpods on the kubelet port, on the CRI fake and a
stand-in for the runtime's streaming server (a raw TCP server that answers the
upgrade and echoes), with raw sockets as the client so every byte is visible."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
import uvloop

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService
from kubelet.kuberuntime import labels
from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.tls import TLSOptions, ensure_self_signed, server_context

UID = "uid-1"
# Both loops through the policy fixture (deprecated in pytest-asyncio 1.x, the
# replacement is a conftest-wide hook).
pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy"')


@pytest.fixture(params=["asyncio", "uvloop"], scope="module")
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    """The kubelet runs on uvloop, whose transports differ from asyncio's: both."""
    if request.param == "uvloop":
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"


class Backend:
    """The runtime's streaming server: records each request head, then per path:
    /exec, /attach, /portforward: 101 and echo (on EOF: 'bye' and close);
    mode 'refuse': 404 with a body; 'ok': a 200 that is no upgrade; 'flood': 101
    then `flood` bytes as fast as the client takes them."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.mode = "echo"
        self.flood = 0
        self.flood_sent = 0
        self.flood_digest = ""
        self.open = 0
        self.server: asyncio.Server | None = None
        self.eofs = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            head = await r.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if self.mode == "refuse":
                body = b"no such token"
                w.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await w.drain()
                return
            if self.mode == "ok":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await w.drain()
                return
            if self.mode == "slow":
                await asyncio.sleep(0.3)
            w.write(SWITCH)
            if self.mode == "flood":
                h = hashlib.sha256()
                chunk = os.urandom(64 * 1024)
                while self.flood_sent < self.flood:
                    w.write(chunk)
                    h.update(chunk)
                    self.flood_sent += len(chunk)
                    await w.drain()
                self.flood_digest = h.hexdigest()
                w.close()
                return
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            self.eofs += 1
            w.write(b"bye")
            await w.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            w.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class View:
    def __init__(self, rt: FakeRuntimeService) -> None:
        self.runtime_service = rt
        self.streaming_idle_timeout = 3600.0
        self.pod: dict[str, Any] = {
            "metadata": {"name": "web", "namespace": "default", "uid": UID},
            "spec": {"containers": [{"name": "main", "image": "busybox", "tty": True}]},
        }

    def get_pods(self) -> list[dict[str, Any]]:
        return [self.pod]

    def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
        return self.pod if (namespace_, name) == ("default", "web") else None

    def healthz_checks(self) -> dict[str, s.HealthCheck]:
        return {}


async def _runtime() -> tuple[FakeRuntimeService, str, str]:
    rt = FakeRuntimeService()
    meta = pb.PodSandboxMetadata(name="web", namespace="default", uid=UID)
    sbl = {labels.POD_UID: UID, labels.POD_NAME: "web", labels.POD_NAMESPACE: "default"}
    sid = await rt.run_pod_sandbox(pb.PodSandboxConfig(metadata=meta, labels=sbl))
    cfg = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="main"),
        image=pb.ImageSpec(image="busybox:1.36"),
        labels={**sbl, labels.CONTAINER_NAME: "main"},
    )
    cid = await rt.create_container(sid, cfg, pb.PodSandboxConfig(metadata=meta))
    await rt.start_container(cid)
    return rt, sid, cid


@pytest.fixture
async def node() -> Any:
    rt, sid, cid = await _runtime()
    backend = Backend()
    rt.streaming_base = await backend.start()
    view = View(rt)
    auth = ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow")
    runner = await s.serve(s.kubelet_app(lambda: view, dict, [], auth), "127.0.0.1", 0)
    port = int(runner.addresses[0][1])
    try:
        yield type(
            "N",
            (),
            dict(rt=rt, sid=sid, cid=cid, backend=backend, view=view, port=port, runner=runner),
        )
    finally:
        await runner.cleanup()
        await backend.stop()


SPDY_HEADERS = (
    "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
    "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret\r\n"
)


async def open_stream(
    port: int, path: str, method: str = "POST", headers: str = SPDY_HEADERS,
    ssl_ctx: ssl.SSLContext | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:  # fmt: skip
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ssl_ctx)
    w.write(f"{method} {path} HTTP/1.1\r\nHost: kubelet\r\n{headers}\r\n".encode())
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
    return r, w, head


async def answer(port: int, path: str, method: str = "POST", headers: str = SPDY_HEADERS) -> tuple[int, bytes]:  # fmt: skip
    r, w, head = await open_stream(port, path, method, headers)
    status = int(head.split()[1])
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")), None,
    )  # fmt: skip
    body = await r.readexactly(length) if length else b""
    w.close()
    return status, body


async def test_exec_is_proxied_byte_for_byte_with_half_close(node: Any) -> None:
    path = "/exec/default/web/main?command=sh&command=-c&command=echo%20hi&input=1&output=1"
    r, w, head = await open_stream(node.port, path)
    assert head == SWITCH  # the runtime's answer, as it sent it
    assert node.rt.called("exec") == [(node.cid, ["sh", "-c", "echo hi"], False, True, True, False)]
    sent = node.backend.heads[0]
    assert sent.startswith(b"POST /exec/tok")
    assert b"Upgrade: SPDY/3.1" in sent and b"X-Stream-Protocol-Version: v4.channel.k8s.io" in sent
    assert b"X-Forwarded-For: 127.0.0.1" in sent
    assert b"Authorization" not in sent  # the client's credentials stay at the kubelet
    payload = bytes(range(256)) * 1000
    w.write(payload)
    assert await r.readexactly(len(payload)) == payload
    # Half-close: our EOF reaches the runtime, its last bytes still come back.
    w.write_eof()
    assert await asyncio.wait_for(r.read(), 5) == b"bye"
    w.close()
    assert node.backend.eofs == 1


async def test_get_and_uid_forms_and_attach_and_port_forward(node: Any) -> None:
    for path, method in (
        ("/exec/default/web/whatever-uid/main?output=1&command=ls", "GET"),
        ("/attach/default/web/main?output=1&error=1", "POST"),
        (f"/attach/default/web/{UID}/main?input=1", "GET"),
        ("/portForward/default/web", "POST"),
        (f"/portForward/default/web/{UID}", "GET"),
    ):
        r, w, head = await open_stream(node.port, path, method)
        assert head == SWITCH, path
        w.write(b"ping")
        assert await r.readexactly(4) == b"ping"
        w.close()
    # attach takes the TTY from the container spec; stderr goes with a TTY
    assert node.rt.called("attach")[0] == (node.cid, True, False, True, True)
    assert node.rt.called("port_forward") == [(node.sid, []), (node.sid, [])]


async def test_websocket_port_forward_takes_ports_from_the_query(node: Any) -> None:
    ws = (
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"
    )
    _r, w, head = await open_stream(node.port, "/portForward/default/web?port=80,8080", "GET", ws)
    assert head == SWITCH
    w.close()
    assert node.rt.called("port_forward") == [(node.sid, [80, 8080])]
    assert node.backend.heads[0].startswith(b"GET /portforward/tok")
    assert b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" in node.backend.heads[0]
    assert await answer(node.port, "/portForward/default/web", "GET", ws) == (
        400,
        b'query parameter "port" is required',
    )
    assert await answer(node.port, "/portForward/default/web?port=0", "GET", ws) == (
        400,
        b'port "0" must be > 0',
    )
    assert await answer(node.port, "/portForward/default/web?port=x", "GET", ws) == (
        400,
        b'unable to parse "x" as a port',
    )


async def test_upstreams_error_answers(node: Any) -> None:
    p = node.port
    assert await answer(p, "/exec/default/nope/main?output=1") == (404, b"pod does not exist")
    assert await answer(p, "/exec/default/web/nope?output=1") == (
        500,
        b'container not found ("nope")',
    )
    assert await answer(p, "/exec/default/web/main") == (
        400,
        b"you must specify at least 1 of stdin, stdout, stderr",
    )
    assert await answer(p, "/attach/default/web/nope?output=1") == (
        500,
        b"container nope not found in pod web_default",
    )
    assert await answer(p, "/portForward/default/web/other-uid") == (404, b"pod not found")
    assert await answer(p, "/portForward/default/nope") == (404, b"pod does not exist")
    # not an upgrade: upstream's proxy refuses with 500
    assert await answer(p, "/exec/default/web/main?output=1", headers="") == (
        500,
        b"Upgrade request required",
    )
    # errors of the runtime, mapped as streaming.WriteError does
    node.rt.inject_error("exec", errors.UnimplementedError("Exec", "not supported here"))
    assert await answer(p, "/exec/default/web/main?output=1") == (
        500,
        b"rpc error: code = Unimplemented desc = not supported here",
    )
    node.rt.inject_error("exec", errors.NotFoundError("Exec", "gone"))
    assert await answer(p, "/exec/default/web/main?output=1") == (
        404,
        b"rpc error: code = NotFound desc = gone",
    )
    # a refusal of the streaming server is echoed; a 200 is no upgrade
    node.backend.mode = "refuse"
    assert await answer(p, "/exec/default/web/main?output=1") == (404, b"no such token")
    node.backend.mode = "ok"
    assert await answer(p, "/exec/default/web/main?output=1") == (
        500,
        b"invalid upgrade response: status code 200",
    )
    # an exited container is not found (only running ones are looked at)
    node.rt.set_exited(node.cid, 0)
    assert (await answer(p, "/exec/default/web/main?output=1"))[0] == 500


async def test_back_pressure_bounds_what_the_kubelet_buffers(node: Any) -> None:
    node.backend.mode = "flood"
    node.backend.flood = 64 * 1024 * 1024
    r, w, head = await open_stream(node.port, "/exec/default/web/main?output=1")
    assert head == SWITCH
    await asyncio.sleep(0.5)  # the client reads nothing: the runtime must be held back
    held = node.backend.flood_sent
    assert held < 24 * 1024 * 1024, held  # socket buffers and the relay's, not 64 MiB
    h = hashlib.sha256()
    got = 0
    while data := await asyncio.wait_for(r.read(1 << 20), 10):
        h.update(data)
        got += len(data)
    assert got == node.backend.flood and h.hexdigest() == node.backend.flood_digest
    w.close()


async def test_idle_connection_is_closed(node: Any) -> None:
    node.view.streaming_idle_timeout = 0.3
    r, w, _head = await open_stream(node.port, "/exec/default/web/main?output=1")
    w.write(b"x")
    assert await r.readexactly(1) == b"x"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await asyncio.wait_for(r.read(), 5) == b""  # closed by the kubelet
    assert 0.2 < loop.time() - t0 < 2
    w.close()
    for _ in range(50):
        if node.backend.open == 0:
            break
        await asyncio.sleep(0.02)
    assert node.backend.open == 0


async def test_client_gone_before_the_runtime_answers(node: Any) -> None:
    node.backend.mode = "slow"
    _, w = await asyncio.open_connection("127.0.0.1", node.port)
    w.write(
        f"POST /exec/default/web/main?output=1 HTTP/1.1\r\nHost: k\r\n{SPDY_HEADERS}\r\n".encode()
    )
    await asyncio.sleep(0.05)
    w.transport.abort()
    # The runtime's stream closes first; aiohttp drops its handler a tick after.
    for _ in range(100):
        await asyncio.sleep(0.05)
        if (
            len(node.backend.heads) == 1
            and node.backend.open == 0
            and node.runner.server.connections == []
        ):
            break
    assert len(node.backend.heads) == 1 and node.backend.open == 0  # not held for the idle timeout
    assert node.runner.server.connections == []


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_aborted_streams_leak_nothing(node: Any) -> None:
    async def one(abort_after_data: bool) -> None:
        r, w, head = await open_stream(node.port, "/exec/default/web/main?input=1&output=1")
        assert head == SWITCH
        if abort_after_data:
            w.write(b"data")
            await r.readexactly(4)
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        w.transport.abort()  # RST, mid-stream

    await one(True)  # warm-up: first-use allocations are not leaks
    await asyncio.sleep(0.1)
    gc.collect()
    fds, tasks = _fds(), len(asyncio.all_tasks())
    # The 1,000 on uvloop (what the kubelet runs); 200 on plain asyncio,
    # which walks the same relay code, to keep the suite's time down.
    count = 1000 if "uvloop" in type(asyncio.get_running_loop()).__module__ else 200
    for i in range(count):
        await one(i % 2 == 0)
    for _ in range(100):
        if (
            node.backend.open == 0
            and _fds() <= fds
            and len(asyncio.all_tasks()) <= tasks
            and not node.runner.server.connections
        ):
            break
        await asyncio.sleep(0.05)
    assert node.backend.open == 0  # every runtime stream was closed
    assert node.runner.server.connections == []  # aiohttp saw every client connection end
    assert _fds() <= fds
    assert len(asyncio.all_tasks()) <= tasks


async def test_run_and_runningpods(node: Any) -> None:
    assert await answer(node.port, "/run/default/web/main?cmd=echo%20a%20b", headers="") == (
        200,
        b"a b\n",
    )
    assert node.rt.called("exec_sync") == [(node.cid, ["echo", "a", "b"], 0)]
    assert (await answer(node.port, "/run/default/nope/main?cmd=ls", headers=""))[0] == 404
    status, body = await answer(node.port, "/runningpods/", "GET", headers="")
    import orjson

    doc = orjson.loads(body)
    assert status == 200 and doc["kind"] == "PodList"
    assert doc["items"] == [
        {
            "metadata": {"name": "web", "namespace": "default", "uid": UID,
                         "creationTimestamp": None},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "resources": {}}]},
            "status": {},
        }
    ]  # fmt: skip


async def test_tls_and_authentication(tmp_path: Path) -> None:
    rt, _sid, _cid = await _runtime()
    backend = Backend()
    rt.streaming_base = await backend.start()
    view = View(rt)
    cert, key = ensure_self_signed(str(tmp_path / "pki"), "node-a", ["127.0.0.1"])
    ctx = server_context(TLSOptions(cert, key, ""))
    trust = ssl.create_default_context(cafile=cert)
    anon = ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow")
    closed = ServerAuth(anonymous_enabled=False, authorization_mode="AlwaysAllow")
    denied = ServerAuth(anonymous_enabled=True, authorization_mode="Webhook")
    runners = [
        await s.serve(s.kubelet_app(lambda: view, dict, [], a), "127.0.0.1", 0, ctx)
        for a in (anon, closed, denied)
    ]
    ports = [int(r.addresses[0][1]) for r in runners]
    try:
        path = "/exec/default/web/main?input=1&output=1"
        r, w, head = await open_stream(ports[0], path, ssl_ctx=trust)
        assert head == SWITCH
        w.write(b"over tls")
        assert await r.readexactly(8) == b"over tls"
        w.close()
        for port, status in ((ports[1], b"401"), (ports[2], b"403")):
            r, w, head = await open_stream(port, path, ssl_ctx=trust)
            assert head.split()[1] == status
            w.close()
        assert len(rt.called("exec")) == 1  # refused requests never reach the runtime
    finally:
        for runner in runners:
            await runner.cleanup()
        await backend.stop()


class ThreadEcho:
    """A streaming server on a thread of its own (not on the loop under test):
    answers the upgrade, then echoes until EOF and says 'bye'."""

    def __init__(self) -> None:
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            conn.sendall(SWITCH)
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.sendall(b"bye")

    def close(self) -> None:
        self.lsock.close()


async def _tls_node(tmp_path: Path, backend_url: str) -> tuple[Any, int, ssl.SSLContext, View]:
    rt, _sid, _cid = await _runtime()
    rt.streaming_base = backend_url
    view = View(rt)
    cert, key = ensure_self_signed(str(tmp_path / "pki"), "node-a", ["127.0.0.1"])
    auth = ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow")
    runner = await s.serve(s.kubelet_app(lambda: view, dict, [], auth), "127.0.0.1", 0,
                           server_context(TLSOptions(cert, key, "")))  # fmt: skip
    return runner, int(runner.addresses[0][1]), ssl.create_default_context(cafile=cert), view


def _blocking_stream(port: int, trust: ssl.SSLContext, path: str) -> ssl.SSLSocket:
    sock = trust.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname="127.0.0.1")  # fmt: skip
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: k\r\n{SPDY_HEADERS}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head == SWITCH
    return sock


async def test_bytes_flow_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    """The relay does not run on the event loop: with the loop stuck in a
    synchronous call, 8 MiB still go through the kubelet port (TLS) and back."""
    echo = ThreadEcho()
    runner, port, trust, _view = await _tls_node(tmp_path, echo.url)
    payload = os.urandom(8 * 1024 * 1024)
    upgraded, loop_blocked, done = threading.Event(), threading.Event(), threading.Event()
    got: list[bytes] = []

    def client() -> None:
        sock = _blocking_stream(port, trust, "/exec/default/web/main?input=1&output=1")
        upgraded.set()
        loop_blocked.wait(10)
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        buf = bytearray()
        while len(buf) < len(payload):
            buf += sock.recv(1 << 20)
        sender.join()
        got.append(bytes(buf))
        done.set()
        sock.close()

    t = threading.Thread(target=client)
    try:
        t.start()
        for _ in range(400):  # the request and the hand-over need the loop: until the 101
            await asyncio.sleep(0.025)
            if upgraded.is_set():
                break
        loop_blocked.set()
        finished = done.wait(30)  # blocks the event loop itself
        assert finished, "nothing moved while the event loop was blocked"
        assert got == [payload]
    finally:
        done.wait(30)
        t.join(30)
        await runner.cleanup()
        echo.close()


async def test_tls_back_pressure_and_integrity(tmp_path: Path) -> None:
    backend = Backend()
    runner, port, trust, _view = await _tls_node(tmp_path, await backend.start())
    backend.mode = "flood"
    backend.flood = 64 * 1024 * 1024
    try:
        r, w, head = await open_stream(port, "/exec/default/web/main?output=1", ssl_ctx=trust)
        assert head == SWITCH
        await asyncio.sleep(0.5)  # the client reads nothing: the runtime is held back
        # socket buffers (loopback autotunes them to several MiB each) and the relay's
        assert backend.flood_sent < 24 * 1024 * 1024, backend.flood_sent
        h = hashlib.sha256()
        got = 0
        while data := await asyncio.wait_for(r.read(1 << 20), 10):
            h.update(data)
            got += len(data)
        assert got == backend.flood and h.hexdigest() == backend.flood_digest
        w.close()
    finally:
        await runner.cleanup()
        await backend.stop()


async def test_tls_idle_connection_is_closed(tmp_path: Path) -> None:
    backend = Backend()
    runner, port, trust, view = await _tls_node(tmp_path, await backend.start())
    view.streaming_idle_timeout = 0.3
    try:
        r, w, _head = await open_stream(port, "/exec/default/web/main?output=1", ssl_ctx=trust)
        w.write(b"x" * 100_000)
        assert await r.readexactly(100_000) == b"x" * 100_000
        t0 = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(r.read(), 5) == b""  # close_notify from the kubelet
        assert 0.2 < asyncio.get_running_loop().time() - t0 < 2
        w.close()
    finally:
        await runner.cleanup()
        await backend.stop()
