"""Ports and HTTP for tests and benchmarks: a free port to give a process, a
small server on an ephemeral one, and a client that waits for a server to
answer."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from aiohttp.log import access_logger

from kubelet.testing.wait import wait_for


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's pick, released): for a
    process to bind, or for a client to find closed."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(
    app: web.Application,
    host: str = "127.0.0.1",
    ssl_context: ssl.SSLContext | None = None,
    access_log: bool = True,
) -> AsyncIterator[int]:
    """`app` served on an ephemeral port of `host` (yielded) until the block ends."""
    runner = web.AppRunner(app, access_log=access_logger if access_log else None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, 0, ssl_context=ssl_context)
        await site.start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """GET `url` (https without verifying the server: a test kubelet's
    self-signed certificate): status and body, also for an error status."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_http(url: str, timeout: float = 30) -> bytes:
    """The body of the first 200 answer from `url`, polled while the server
    comes up (refused connections and other statuses are retried)."""

    def answered() -> tuple[bytes]:
        code, body = http_get(url)
        if code != 200:
            raise OSError(f"HTTP {code}")
        return (body,)

    return wait_for(f"{url} to answer", answered, timeout, every=0.2, retry_on=(OSError,))[0]
