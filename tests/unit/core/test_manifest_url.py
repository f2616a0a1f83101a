"""--manifest-url: a bounded body, bounded redirects to http(s) only, and the
last good pods kept whatever the URL answers next."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from kubelet.config.common import ManifestError
from kubelet.config.config import PodConfig
from kubelet.config.http import MAX_MANIFEST_BYTES, HTTPSource


def manifest(name: str, pad: int = 0) -> str:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    return yaml.safe_dump(pod) + ("#" + "x" * pad + "\n" if pad else "")


class Server:
    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.runner: web.AppRunner | None = None
        self.eighth = asyncio.Event()

    async def handler(self, req: web.Request) -> web.StreamResponse:
        self.seen.append((req.path, req.headers.get("Authorization"), req.headers.get("X-Site")))
        if len(self.seen) >= 8:
            self.eighth.set()
        answer = self.answers[req.path]
        if isinstance(answer, tuple):  # (status, location)
            raise web.HTTPFound(answer[1]) if answer[0] == 302 else web.HTTPNotFound()
        return web.Response(text=answer)

    async def start(self, host: str = "127.0.0.1") -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/{tail:.*}", self.handler)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, 0)
        await site.start()
        return f"http://{host}:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def names_after(src: HTTPSource, cfg: PodConfig) -> list[str]:
    async with aiohttp.ClientSession() as session:
        try:
            await src.fetch_once(session)
        except (aiohttp.ClientError, OSError, ManifestError) as err:  # what run() logs
            logging.getLogger("test").warning("fetch failed: %s", err)
    return sorted(p["metadata"]["name"] for p in cfg.all_pods())


async def test_an_oversized_manifest_is_refused_and_the_pods_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv = Server()
    base = await srv.start()
    cfg = PodConfig()
    src = HTTPSource(base + "/pods", {}, "n1", 1, cfg)
    try:
        srv.answers["/pods"] = manifest("small")
        assert await names_after(src, cfg) == ["small-n1"]
        srv.answers["/pods"] = manifest("huge", pad=MAX_MANIFEST_BYTES)  # a valid pod, 10 MiB+
        assert await names_after(src, cfg) == ["small-n1"]
        assert "larger than 10485760 bytes" in caplog.text
        srv.answers["/pods"] = manifest("fits", pad=MAX_MANIFEST_BYTES - 1000)
        assert await names_after(src, cfg) == ["fits-n1"]
    finally:
        await srv.stop()


async def test_redirects_bounded_http_only_and_credentials_stay_on_their_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv, other = Server(), Server()
    base = await srv.start()
    elsewhere = await other.start("127.0.0.2")
    cfg = PodConfig()
    headers = {"Authorization": ["Bearer node-secret"], "X-Site": ["a"]}
    src = HTTPSource(base + "/pods", headers, "n1", 1, cfg)
    try:
        srv.answers["/pods"] = (302, "/moved")
        srv.answers["/moved"] = manifest("one")
        assert await names_after(src, cfg) == ["one-n1"]
        assert srv.seen[-1] == ("/moved", "Bearer node-secret", "a")  # same host: kept
        srv.answers["/pods"] = (302, elsewhere + "/pods")
        other.answers["/pods"] = manifest("two")
        assert await names_after(src, cfg) == ["two-n1"]
        assert other.seen == [("/pods", None, "a")]  # another host: credentials dropped
        for i in range(12):  # a loop longer than Go's 10
            srv.answers[f"/r{i}"] = (302, f"/r{i + 1}")
        srv.answers["/pods"] = (302, "/r0")
        assert await names_after(src, cfg) == ["two-n1"]
        assert "stopped after 10 redirects" in caplog.text
        srv.answers["/pods"] = (302, "file:///etc/hostname")
        assert await names_after(src, cfg) == ["two-n1"]
        srv.answers["/pods"] = "kind: Pod\nmetadata: [broken\n"
        assert await names_after(src, cfg) == ["two-n1"]
        srv.answers["/pods"] = ""  # empty: no pods, as upstream
        assert await names_after(src, cfg) == []
    finally:
        await srv.stop()
        await other.stop()


async def test_failures_in_a_row_are_logged_a_few_times_then_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv = Server()
    base = await srv.start()
    srv.answers["/pods"] = (404, "")
    src = HTTPSource(base + "/pods", {}, "n1", 0.01, PodConfig())
    stop = asyncio.Event()
    caplog.set_level(logging.DEBUG, logger="kubelet.config.http")
    task = asyncio.create_task(src.run(stop))
    try:
        await asyncio.wait_for(srv.eighth.wait(), 30)
    finally:
        stop.set()
        await task
        await srv.stop()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 4 and len(srv.seen) >= 8
