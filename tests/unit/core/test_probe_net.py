"""HTTP, TCP and gRPC probes against real local servers: IPv6 pod IPs, the body
read and its bound, no state kept between probes, per-pod name lookups."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import grpc
import pytest
from aiohttp import web

from kubelet.lifecycle.handlers import HandlerRunner
from kubelet.probe.dial import Resolver
from kubelet.prober.prober import Prober, Result


def pod(ip: str, uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": uid}, "status": {"podIP": ip}}


async def serve(host: str, handler: Any) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    return runner, int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


async def test_http_and_tcp_probes_reach_an_ipv6_pod_ip() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers["Host"])
        return web.Response(text="six")

    runner, port = await serve("::1", handler)
    prober = Prober(None)
    try:
        http = {"httpGet": {"path": "/", "port": port}, "timeoutSeconds": 5}
        assert await prober.probe(pod("::1"), {"name": "c"}, "cid", http) == (Result.SUCCESS, "six")
        assert seen == [f"[::1]:{port}"]  # Go's Host for an IPv6 URL
        tcp = {"tcpSocket": {"port": port}, "timeoutSeconds": 5}
        assert (await prober.probe(pod("::1"), {"name": "c"}, "cid", tcp))[0] is Result.SUCCESS
    finally:
        await prober.close()
        await runner.cleanup()


async def test_grpc_probe_reaches_an_ipv6_pod_ip() -> None:
    def check(request: bytes, _ctx: Any) -> bytes:
        return b"\x08\x01" if request in (b"", b"\x0a\x03app") else b"\x08\x02"

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(check)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": handler}),)
    )
    port = server.add_insecure_port("[::1]:0")
    await server.start()
    prober = Prober(None)
    try:
        spec = {"grpc": {"port": port}, "timeoutSeconds": 5}
        assert await prober.probe(pod("::1"), {"name": "c"}, "cid", spec) == (Result.SUCCESS, "")
        spec["grpc"] = {"port": port, "service": "other"}
        result, out = await prober.probe(pod("::1"), {"name": "c"}, "cid", spec)
        assert result is Result.FAILURE and "responded with 2" in out
    finally:
        await prober.close()
        await server.stop(None)


async def test_http_probe_reads_the_body_within_its_timeout_and_at_most_10k() -> None:
    unstall = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"x" * 100)
        if request.path == "/stall":
            await unstall.wait()  # headers sent, the rest of the body never comes
        else:
            for _ in range(10):
                await resp.write(b"y" * 4096)
        await resp.write_eof()
        return resp

    runner, port = await serve("127.0.0.1", handler)
    prober = Prober(None)
    try:
        spec: dict[str, Any] = {"httpGet": {"path": "/big", "port": port}, "timeoutSeconds": 5}
        result, body = await prober.probe(pod("127.0.0.1"), {"name": "c"}, "cid", spec)
        assert result is Result.SUCCESS and len(body) == 10 * 1024  # truncated, still a success
        spec = {"httpGet": {"path": "/stall", "port": port}, "timeoutSeconds": 1}
        t0 = time.monotonic()
        result, out = await prober.probe(pod("127.0.0.1"), {"name": "c"}, "cid", spec)
        assert result is Result.FAILURE and "context deadline exceeded" in out
        assert time.monotonic() - t0 < 5  # the probe's own timeout, not the server's stall
    finally:
        unstall.set()
        await prober.close()
        await runner.cleanup()


async def test_probes_keep_no_cookies_and_ask_for_no_compression() -> None:
    got: list[tuple[str | None, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        got.append((request.headers.get("Cookie"), request.headers.get("Accept-Encoding")))
        resp = web.Response(text="ok")
        resp.set_cookie("session", "x" * 1000)
        return resp

    runner, port = await serve("127.0.0.1", handler)
    prober = Prober(None)
    try:
        spec = {"httpGet": {"path": "/", "port": port}, "timeoutSeconds": 5}
        for u in ("a", "b"):
            assert (await prober.probe(pod("127.0.0.1", u), {"name": "c"}, "cid", spec))[0] is (
                Result.SUCCESS
            )
        # A reply cannot plant state that the next probe (another pod's) carries.
        assert got == [(None, None), (None, None)]
    finally:
        await prober.close()
        await runner.cleanup()


async def test_lifecycle_hook_reaches_an_ipv6_pod_ip() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(f"{request.path} {request.headers['Host']}")
        return web.Response(text="ok")

    runner, port = await serve("::1", handler)

    async def ips(_pod: Any) -> list[str]:
        return ["::1"]

    hooks = HandlerRunner(None, ips)  # type: ignore[arg-type]
    try:
        handler_spec = {"httpGet": {"path": "/start", "port": port}}
        assert await hooks.run("cid", pod("::1"), {"name": "c"}, handler_spec) is None
        assert seen == [f"/start [::1]:{port}"]
    finally:
        await hooks.close()
        await runner.cleanup()


async def test_a_pods_hanging_lookups_hold_one_thread_and_never_delay_another_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = socket.getaddrinfo
    release = threading.Event()
    running = {"now": 0, "max": 0}
    lock = threading.Lock()

    def fake(host: str, port: int, *a: Any, **kw: Any) -> Any:
        if host == "hang.test":
            with lock:
                running["now"] += 1
                running["max"] = max(running["max"], running["now"])
            release.wait(10)
            with lock:
                running["now"] -= 1
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1" if host == "fine.test" else host, port, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    r = Resolver()

    async def hostile() -> None:
        async with asyncio.timeout(0.1):
            await r.resolve("bad-pod", "hang.test", 80)

    try:
        for _ in range(10):  # each gives up after 0.1 s; its thread goes on
            with pytest.raises(TimeoutError):
                await hostile()
        async with asyncio.timeout(2):
            assert await r.resolve("good-pod", "fine.test", 80) == (socket.AF_INET, "127.0.0.1")
        assert await r.resolve("good-pod", "10.1.2.3", 80) == (socket.AF_INET, "10.1.2.3")
        assert running["max"] == 1
    finally:
        release.set()
    await asyncio.sleep(0.1)
    with pytest.raises(OSError, match=r"lookup hang\.test: .*Temporary failure"):
        await r.resolve("bad-pod", "hang.test", 80)
    assert r.busy() == 0
