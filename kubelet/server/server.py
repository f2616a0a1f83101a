"""aiohttp applications for the kubelet port, the read-only port and the healthz port.

The servers read the node through a small interface (host.NodeView) so they do
not depend on how the Kubelet is put together. The debugging handlers live in
debugging.py, authentication and authorization in auth.py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kubelet.metrics import PROBER_REGISTRY
from kubelet.server import debugging
from kubelet.server.auth import AuthorizationError, ServerAuth, api_verb
from kubelet.server.debugging import DebugHandlers
from kubelet.server.host import HealthCheck, NodeView, NoPods, SummaryProvider
from kubelet.server.httpmetrics import READ_ONLY_PATHS, READ_WRITE_PATHS, http_metrics
from kubelet.server.tlsproto import TLSSite

__all__ = ["DebugHandlers", "HealthCheck", "NoPods", "NodeView", "SummaryProvider"]

log = logging.getLogger(__name__)


def _run_checks(checks: dict[str, HealthCheck]) -> tuple[bool, list[str]]:
    ok = True
    lines = ["[+]ping ok", "[+]log ok"]
    for name, check in checks.items():
        try:
            reason = check()
        except Exception as err:  # a broken check is a failed check, not a 500 crash
            reason = f"check raised {err!r}"
        if reason is None:
            lines.append(f"[+]{name} ok")
        else:
            ok = False
            lines.append(f"[-]{name} failed: reason withheld")
            log.info("healthz check %s failed: %s", name, reason)
    return ok, lines


def add_healthz(app: web.Application, node: Callable[[], NodeView]) -> None:
    async def healthz(request: web.Request) -> web.Response:
        ok, lines = _run_checks(node().healthz_checks())
        if ok:
            if "verbose" in request.query:
                return web.Response(text="\n".join(lines) + "\nhealthz check passed\n")
            return web.Response(text="ok")
        return web.Response(status=500, text="\n".join(lines) + "\nhealthz check failed\n")

    async def one(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name in ("ping", "log"):
            return web.Response(text="ok")
        checks = node().healthz_checks()
        if name not in checks:
            raise web.HTTPNotFound()
        ok, _ = _run_checks({name: checks[name]})
        return web.Response(status=200 if ok else 500, text="ok" if ok else f"{name} failed")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/healthz/{name}", one)


def _add_common(
    app: web.Application,
    node: Callable[[], NodeView],
    registries: list[CollectorRegistry],
) -> None:
    add_healthz(app, node)

    async def pods(_: web.Request) -> web.Response:
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": node().get_pods()}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def metrics(_: web.Request) -> web.Response:
        data = b"".join(generate_latest(r) for r in registries)
        resp = web.Response(body=data)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def summary(_: web.Request) -> web.Response:
        provider = node().stats
        if provider is None:
            raise web.HTTPNotFound(text="no stats provider")
        # Reading a few thousand cgroup files is blocking work: off the event loop.
        body = await asyncio.get_running_loop().run_in_executor(None, provider.summary)
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    def stats_metrics(
        registry: Callable[[NodeView], CollectorRegistry | None],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(_: web.Request) -> web.Response:
            reg = registry(node())
            if reg is None:
                raise web.HTTPNotFound(text="no stats provider")
            # A collection reads cgroup files: off the event loop.
            data = await asyncio.get_running_loop().run_in_executor(None, generate_latest, reg)
            resp = web.Response(body=data)
            resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return resp

        return handler

    app.router.add_get("/stats/summary", summary)
    app.router.add_get("/metrics/resource", stats_metrics(lambda v: v.resource_registry))
    app.router.add_get("/metrics/cadvisor", stats_metrics(lambda v: v.cadvisor_registry))
    app.router.add_get("/pods", pods)
    app.router.add_get("/pods/", pods)
    app.router.add_get("/metrics", metrics)

    async def probe_metrics(_: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(PROBER_REGISTRY))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    # Not a debugging handler: upstream serves it on the read-only port too.
    app.router.add_get("/metrics/probes", probe_metrics)


def kubelet_app(
    node: Callable[[], NodeView],
    configz: Callable[[], dict[str, Any]],
    registries: list[CollectorRegistry],
    auth: ServerAuth,
    debug: DebugHandlers | None = None,
) -> web.Application:
    """The main kubelet port: every request authenticated and authorized first;
    the debugging handlers as the config says."""
    app = web.Application(
        middlewares=[http_metrics("readwrite", READ_WRITE_PATHS), _auth_filter(auth)]
    )
    _add_common(app, node, registries)
    debugging.install(app, node, debug or DebugHandlers(), configz)
    return app


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _auth_filter(auth: ServerAuth) -> Middleware:
    """server.go InstallAuthFilter: 401, then 403 (or 500 when the review failed)."""

    @web.middleware
    async def filter_(request: web.Request, handler: Handler) -> web.StreamResponse:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        user = await auth.authenticate(ssl_object, request.headers.get("Authorization"))
        if user is None:
            return web.Response(status=401, text="Unauthorized")
        verb = api_verb(request.method)
        try:
            decision = await auth.authorize(user, request.method, request.path)
        except AuthorizationError as err:
            log.error("Authorization error (user=%s, verb=%s): %s", user.name, verb, err)
            text = (
                f"Authorization error (user={user.name}, verb={verb}, resource=nodes, "
                f"subresource={err.subresource})"
            )
            return web.Response(status=500, text=text)
        if not decision.allowed:
            subs = " ".join(decision.subresources)
            text = f"Forbidden (user={user.name}, verb={verb}, resource=nodes, subresource(s)=[{subs}])\n"
            return web.Response(status=403, text=text)
        return await handler(request)

    return filter_


def read_only_app(
    node: Callable[[], NodeView], registries: list[CollectorRegistry]
) -> web.Application:
    """The read-only port: no authentication, no configuration, no exec."""
    app = web.Application(middlewares=[http_metrics("readonly", READ_ONLY_PATHS)])
    _add_common(app, node, registries)
    return app


def healthz_app(node: Callable[[], NodeView]) -> web.Application:
    app = web.Application()
    add_healthz(app, node)
    return app


IDLE_TIMEOUT = 90.0
MAX_LINE_BYTES = 64 * 1024
MAX_FIELD_BYTES = 16 * 1024
MAX_HEADERS = 64


class _ClientErrorFilter(logging.Filter):
    """aiohttp logs a request it could not parse (a bad request line, header or
    chunk) with a traceback at ERROR, after answering it 400. That is the
    client's fault, not the kubelet's: Go's server answers 400 and logs nothing.
    Keep one line without the traceback, at debug level (-v=4)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True  # a handler's own exception: logged in full
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False
        first = (str(exc.message).splitlines() or [""])[0]
        record.msg = f"{record.getMessage()}: {exc.code} {first}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_CLIENT_ERRORS = _ClientErrorFilter()


async def serve(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    server_log = logging.getLogger("aiohttp.server")
    if _CLIENT_ERRORS not in server_log.filters:
        server_log.addFilter(_CLIENT_ERRORS)
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        # Go's http.Server for these ports: IdleTimeout 90s, MaxHeaderBytes 1 MiB
        # for the request line and headers together. aiohttp bounds a line, one
        # header and the header count instead: 64 headers of up to 16 KiB keep the
        # total at Go's 1 MiB while a large bearer token (aiohttp's default is
        # 8 KiB) still fits. Past a bound the answer is a 400 and a closed
        # connection. Go's 4 h read/write timeouts are not set: a slow client
        # costs a socket, not the event loop.
        keepalive_timeout=IDLE_TIMEOUT,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_FIELD_BYTES,
        max_headers=MAX_HEADERS,
    )
    await runner.setup()
    # With TLS, a site whose sessions exec/attach/port-forward can hand to their
    # relay threads (kubelet/server/tlsproto.py).
    site_type = TLSSite if ssl_context is not None else web.TCPSite
    site = site_type(runner, host or None, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    log.info("Serving %s on %s:%d", "https" if ssl_context else "http", host or "0.0.0.0", port)
    return runner
