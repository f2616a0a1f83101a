"""aiohttp applications for the kubelet port, the read-only port and the healthz port.

The servers read the node through a small interface (NodeView) so they do not
depend on how the Kubelet is put together.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kubelet.cri import errors as cri_errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import labels
from kubelet.kuberuntime.logs import LogOptions, LogOptionsError, LogTargetError, parse_options
from kubelet.metrics import PROBER_REGISTRY
from kubelet.server import streaming
from kubelet.server.auth import ServerAuth, api_verb

log = logging.getLogger(__name__)

HealthCheck = Callable[[], str | None]


class SummaryProvider(Protocol):
    def summary(self) -> dict[str, Any]:
        """/stats/summary; blocking (reads cgroup files): called off the event loop."""
        ...


class NodeView(Protocol):
    """What the servers read of the node (the HostInterface upstream)."""

    @property
    def stats(self) -> SummaryProvider | None: ...

    @property
    def resource_registry(self) -> CollectorRegistry | None: ...

    @property
    def cadvisor_registry(self) -> CollectorRegistry | None:
        """/metrics/cadvisor: container_* series from the stats provider's collection."""
        ...

    def get_pods(self) -> list[dict[str, Any]]: ...

    def healthz_checks(self) -> dict[str, HealthCheck]: ...

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        """Stream a container's log; raises LogTargetError before the first byte."""
        ...

    def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
        """The pod as the kubelet runs it (for a static pod: not the mirror pod)."""
        ...

    @property
    def runtime_service(self) -> RuntimeService | None:
        """The CRI runtime: exec, attach, port-forward, run and /runningpods ask it."""
        ...

    @property
    def streaming_idle_timeout(self) -> float:
        """streamingConnectionIdleTimeout, seconds (0: none)."""
        ...


class NoPods:
    """What the servers see before the pod machinery exists (and in tests)."""

    stats: SummaryProvider | None = None
    resource_registry: CollectorRegistry | None = None
    cadvisor_registry: CollectorRegistry | None = None
    runtime_service: RuntimeService | None = None
    streaming_idle_timeout: float = 4 * 3600.0

    def get_pods(self) -> list[dict[str, Any]]:
        return []

    def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
        return None

    def healthz_checks(self) -> dict[str, HealthCheck]:
        return {}

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        raise LogTargetError(f'pod "{pod_name}" does not exist', 404)


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


def kubelet_app(
    node: Callable[[], NodeView],
    configz: Callable[[], dict[str, Any]],
    registries: list[CollectorRegistry],
    auth: ServerAuth,
) -> web.Application:
    """The main kubelet port: authenticated and authorized, with /configz."""

    @web.middleware
    async def authn(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        user = await auth.authenticate(ssl_object, request.headers.get("Authorization"))
        if user is None:
            return web.Response(status=401, text="Unauthorized")
        verb = api_verb(request.method)
        if not await auth.authorize(user, request.method, request.path):
            return web.Response(
                status=403,
                text=f"Forbidden (user={user.name}, verb={verb}, path={request.path})",
            )
        return await handler(request)

    app = web.Application(middlewares=[authn])
    _add_common(app, node, registries)

    async def configz_handler(_: web.Request) -> web.Response:
        return web.Response(
            body=orjson.dumps({"kubeletconfig": configz()}), content_type="application/json"
        )

    app.router.add_get("/configz", configz_handler)

    async def probe_metrics(_: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(PROBER_REGISTRY))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app.router.add_get("/metrics/probes", probe_metrics)

    async def logs_handler(request: web.Request) -> web.StreamResponse:
        return await container_logs(request, node())

    # Debugging handlers: on the authenticated port only, as upstream.
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs_handler)
    add_streaming(app, node)
    return app


def add_streaming(app: web.Application, node: Callable[[], NodeView]) -> None:
    """/exec, /attach, /portForward (GET or POST, with or without the pod UID), /run,
    /runningpods/: the paths the API server's pods/exec, attach, portforward reach."""

    def pod_or_404(view: NodeView, m: Any) -> dict[str, Any]:
        pod = view.get_pod_by_name(m["namespace"], m["pod"])
        if pod is None:
            raise streaming.StreamError(404, "pod does not exist")
        return pod

    def runtime(view: NodeView) -> RuntimeService:
        rt = view.runtime_service
        if rt is None:
            raise streaming.StreamError(503, "the container runtime is not available yet")
        return rt

    async def answer(
        request: web.Request, get_url: Callable[[NodeView], Awaitable[str]]
    ) -> web.StreamResponse:
        view = node()
        try:
            url = await get_url(view)
        except streaming.StreamError as err:
            return streaming.plain_error(err.status, err.text)
        except cri_errors.CRIError as err:  # the container lookup itself failed
            return streaming.plain_error(500, str(err))
        return await streaming.proxy_stream(request, url, view.streaming_idle_timeout)

    async def exec_(request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            opts = streaming.stream_options(request)
            m = request.match_info
            pod = pod_or_404(view, m)
            cmd = request.query.getall("command", [])
            return await streaming.exec_url(runtime(view), pod, m["container"], cmd, opts)

        return await answer(request, url)

    async def attach(request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            opts = streaming.stream_options(request)
            m = request.match_info
            pod = pod_or_404(view, m)
            uid = m.get("uid", "")
            return await streaming.attach_url(runtime(view), pod, uid, m["container"], opts)

        return await answer(request, url)

    async def port_forward(request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            ports = streaming.port_options(request)
            m = request.match_info
            pod = pod_or_404(view, m)
            if m.get("uid") and m["uid"] != pod["metadata"]["uid"]:
                raise streaming.StreamError(404, "pod not found")
            return await streaming.port_forward_url(runtime(view), pod, ports)

        return await answer(request, url)

    async def run(request: web.Request) -> web.StreamResponse:
        """POST /run: the command's output in the body (stdout, then stderr)."""
        view = node()
        m = request.match_info
        try:
            pod = pod_or_404(view, m)
            rt = runtime(view)
            # For legacy reasons /run splits one cmd parameter on spaces.
            cmd = request.query.get("cmd", "").split(" ")
            cid = await streaming.running_container(rt, str(pod["metadata"]["uid"]), m["container"])
            if cid is None:
                raise streaming.StreamError(500, f'container not found ("{m["container"]}")')
            resp = await rt.exec_sync(cid, cmd, 0)
        except streaming.StreamError as err:
            return streaming.plain_error(err.status, err.text)
        except cri_errors.CRIError as err:
            return streaming.plain_error(500, str(err))
        if resp.exit_code != 0:
            text = f"command '{' '.join(cmd)}' exited with {resp.exit_code}: "
            return web.Response(status=500, body=text.encode() + resp.stderr)
        return web.Response(body=resp.stdout + resp.stderr, content_type="application/json")

    async def running_pods(_: web.Request) -> web.Response:
        rt = node().runtime_service
        items: list[dict[str, Any]] = []
        if rt is not None:
            try:
                items = await runtime_pods(rt)
            except cri_errors.CRIError as err:
                return web.Response(status=500, text=str(err))
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    for verb in ("GET", "POST"):
        app.router.add_route(verb, "/exec/{namespace}/{pod}/{container}", exec_)
        app.router.add_route(verb, "/exec/{namespace}/{pod}/{uid}/{container}", exec_)
        app.router.add_route(verb, "/attach/{namespace}/{pod}/{container}", attach)
        app.router.add_route(verb, "/attach/{namespace}/{pod}/{uid}/{container}", attach)
        app.router.add_route(verb, "/portForward/{namespace}/{pod}", port_forward)
        app.router.add_route(verb, "/portForward/{namespace}/{pod}/{uid}", port_forward)
    app.router.add_post("/run/{namespace}/{pod}/{container}", run)
    app.router.add_post("/run/{namespace}/{pod}/{uid}/{container}", run)
    app.router.add_get("/runningpods/", running_pods)


async def runtime_pods(rt: RuntimeService) -> list[dict[str, Any]]:
    """Pods as the runtime sees them (GetRunningPods upstream): ready sandboxes and
    running containers grouped by pod UID, as name, namespace, uid and containers."""
    sandboxes = await rt.list_pod_sandbox(
        pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    )
    containers = await rt.list_containers(
        pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    )
    pods: dict[str, dict[str, Any]] = {}

    def pod_for(lbl: Any, meta_name: str, meta_ns: str, meta_uid: str) -> dict[str, Any]:
        u = lbl.get(labels.POD_UID) or meta_uid
        p = pods.get(u)
        if p is None:
            p = pods[u] = {
                "metadata": {
                    "name": lbl.get(labels.POD_NAME) or meta_name,
                    "namespace": lbl.get(labels.POD_NAMESPACE) or meta_ns,
                    "uid": u,
                    "creationTimestamp": None,
                },
                "spec": {"containers": []},
                "status": {},
            }
        return p

    for sb in sandboxes:
        pod_for(sb.labels, sb.metadata.name, sb.metadata.namespace, sb.metadata.uid)
    for c in containers:
        if labels.POD_UID not in c.labels:
            continue  # not the kubelet's
        p = pod_for(c.labels, "", "", "")
        p["spec"]["containers"].append(
            {"name": c.metadata.name, "image": c.image.image, "resources": {}}
        )
    return list(pods.values())


async def container_logs(request: web.Request, node: NodeView) -> web.StreamResponse:
    """GET /containerLogs/{namespace}/{pod}/{container}: what `kubectl logs` reaches
    through the API server. Errors before the first byte are 4xx with the reason;
    the log itself streams as chunked text/plain."""
    try:
        opts = parse_options(request.query)
    except LogOptionsError as err:
        return web.Response(status=422, text=str(err))
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    resp.enable_chunked_encoding()

    async def write(data: bytes) -> None:
        if not resp.prepared:
            await resp.prepare(request)
        await resp.write(data)

    m = request.match_info
    try:
        await node.container_logs(m["namespace"], m["pod"], m["container"], opts, write)
    except LogTargetError as err:
        if resp.prepared:  # the status line is gone: end the stream
            log.warning("container logs %s: %s", request.path, err)
            return resp
        return web.Response(status=err.status, text=str(err))
    if not resp.prepared:
        await resp.prepare(request)  # an empty log is an empty 200
    await resp.write_eof()
    return resp


def read_only_app(
    node: Callable[[], NodeView], registries: list[CollectorRegistry]
) -> web.Application:
    """The read-only port: no authentication, no configuration, no exec."""
    app = web.Application()
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
    site = web.TCPSite(runner, host or None, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    log.info("Serving %s on %s:%d", "https" if ssl_context else "http", host or "0.0.0.0", port)
    return runner
