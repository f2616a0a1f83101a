"""/logs/ (the node's log directory), /debug/flags/v and /debug/pprof/ on the
kubelet port (server.go InstallSystemLogHandler, InstallDebugFlagsHandler,
InstallProfilingHandler).

/logs/ serves files and directory listings under /var/log as Go's
http.FileServer does. One difference: a link is followed only when it ends
inside the log directory (/var/log/containers/*.log point into /var/log/pods),
where Go's http.Dir follows any link. The NodeLogQuery mode (journal queries)
is not implemented. /debug/pprof/ is Go's profiler, which a Python process
does not have: with the handler enabled the path answers 501 and the start
log says so.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
from urllib.parse import quote

from aiohttp import web

from kubelet.util.logs import level_for

log = logging.getLogger(__name__)

_LISTING_HEAD = '<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'


def go_error(status: int, text: str) -> web.Response:
    """What Go's http.Error writes."""
    resp = web.Response(status=status, text=text + "\n", charset="utf-8")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def _plain(status: int, text: str) -> web.Response:
    """Go's routes.writePlainText."""
    resp = web.Response(status=status, text=text + "\n", content_type="text/plain")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def install(app: web.Application, root: str, enabled: bool) -> None:
    if not enabled:

        async def off(_: web.Request) -> web.Response:
            return go_error(405, "logs endpoint is disabled.")

        app.router.add_route("*", "/logs/{tail:.*}", off)
        return

    async def serve(request: web.Request) -> web.StreamResponse:
        return await serve_log_path(request, root, request.match_info["tail"])

    app.router.add_get("/logs/{tail:.*}", serve)


def _resolve(root: str, rel: str) -> str | None:
    """The file under root that rel names, or None if it leaves root (after links)."""
    clean = os.path.normpath("/" + rel).lstrip("/")  # Go's path.Clean("/" + name)
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(real_root, clean))
    if target != real_root and not target.startswith(real_root + os.sep):
        return None
    return target


async def serve_log_path(request: web.Request, root: str, rel: str) -> web.StreamResponse:
    # A few stat calls and perhaps a directory read: off the event loop.
    kind, path = await asyncio.to_thread(_lookup, root, rel)
    if kind == "missing":
        return _plain(404, "404 page not found")
    if kind == "redirect":
        raise web.HTTPMovedPermanently(path)
    if kind == "listing":
        return web.Response(text=path, content_type="text/html")
    return web.FileResponse(path)


def _lookup(root: str, rel: str) -> tuple[str, str]:
    """("file", path), ("listing", html), ("redirect", suffix change) or ("missing", "")."""
    target = _resolve(root, rel)
    if target is None or not os.path.exists(target):
        return "missing", ""
    if os.path.isdir(target):
        if rel and not rel.endswith("/"):
            return "redirect", "/logs/" + rel + "/"
        index = os.path.join(target, "index.html")
        if os.path.isfile(index) and _resolve(root, os.path.join(rel, "index.html")):
            return "file", index
        return "listing", _listing(target)
    if rel.endswith("/"):
        return "redirect", "/logs/" + rel.rstrip("/")
    return "file", target


def _listing(path: str) -> str:
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        entries = []
    parts = [_LISTING_HEAD]
    for e in entries:
        name = e.name + ("/" if e.is_dir() else "")
        parts.append(f'<a href="{quote(name)}">{html.escape(name)}</a>\n')
    parts.append("</pre>\n")
    return "".join(parts)


def install_flags(app: web.Application, enabled: bool) -> None:
    """PUT /debug/flags/v with a number sets the log verbosity, as -v does."""

    async def handler(request: web.Request) -> web.Response:
        if not enabled:
            return go_error(405, "flags endpoint is disabled.")
        if request.method != "PUT":
            return _plain(406, "unsupported http method")
        value = (await request.content.read(64)).decode(errors="replace")
        if not value.isdigit() or int(value) >= 2**32:
            return _plain(400, f'strconv.ParseUint: parsing "{value}": invalid syntax')
        logging.getLogger().setLevel(level_for(int(value)))
        log.info("Log verbosity set to %s through /debug/flags/v", value)
        return _plain(200, f"successfully set klog.logging.verbosity to {value}")

    app.router.add_route("*", "/debug/flags/v", handler)


def install_pprof(app: web.Application, enabled: bool) -> None:
    if enabled:
        log.info(
            "enableProfilingHandler: /debug/pprof/ (Go's profiler) is not served by this kubelet"
        )

    async def handler(_: web.Request) -> web.Response:
        if not enabled:
            return go_error(405, "profiling endpoint is disabled.")
        return _plain(501, "profiling endpoint is not implemented by this kubelet")

    app.router.add_route("*", "/debug/pprof/{tail:.*}", handler)
