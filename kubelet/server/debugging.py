"""The kubelet port's debugging handlers and what replaces them when they are
off (server.go InstallAuthRequiredHandlers / InstallDebuggingDisabledHandlers).

With enableDebuggingHandlers: /run, /exec, /attach, /portForward,
/containerLogs, /configz and /runningpods/, and, each behind its own switch,
/logs/ (enableSystemLogHandler), /debug/pprof/ (enableProfilingHandler) and
/debug/flags/v (enableDebugFlagsHandler). Without it, the debugging paths
answer 405 "Debug endpoints are disabled." and /configz and /debug/flags/v
are not there (404), as upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kubelet.cri import errors as cri_errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import labels
from kubelet.kuberuntime.logs import LogOptionsError, LogTargetError, parse_options
from kubelet.server import checkpoint, nodelogs, streaming
from kubelet.server.host import NodeView
from kubelet.types import Pod

log = logging.getLogger(__name__)

# Served 405 when debugging handlers are off (server.go's list, any method).
DISABLED_PREFIXES = (
    "/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/",
    "/debug/pprof/", "/logs/",
)  # fmt: skip


@dataclass(frozen=True)
class DebugHandlers:
    """The KubeletConfiguration switches for the debugging handlers."""

    enable_debugging_handlers: bool = True
    enable_system_log_handler: bool = True
    enable_profiling_handler: bool = True
    enable_debug_flags_handler: bool = True
    system_log_dir: str = "/var/log"
    # ContainerCheckpoint: POST /checkpoint/... archives go here ("": not served).
    checkpoint_dir: str = ""


def install(
    app: web.Application,
    node: Callable[[], NodeView],
    opts: DebugHandlers,
    configz: Callable[[], dict[str, Any]],
) -> None:
    if not opts.enable_debugging_handlers:

        async def disabled(_: web.Request) -> web.Response:
            return nodelogs.go_error(405, "Debug endpoints are disabled.")

        for prefix in DISABLED_PREFIXES:
            app.router.add_route("*", prefix + "{tail:.*}", disabled)
        return
    log.info("Adding debug handlers to kubelet server")
    _Streaming(node).install(app)

    async def logs_handler(request: web.Request) -> web.StreamResponse:
        return await container_logs(request, node())

    async def configz_handler(_: web.Request) -> web.Response:
        body = orjson.dumps({"kubeletconfig": configz()})
        return web.Response(body=body, content_type="application/json")

    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs_handler)
    app.router.add_get("/configz", configz_handler)
    nodelogs.install(app, opts.system_log_dir, opts.enable_system_log_handler)
    nodelogs.install_flags(app, opts.enable_debug_flags_handler)
    nodelogs.install_pprof(app, opts.enable_profiling_handler)
    if opts.checkpoint_dir:
        checkpoint.install(app, node, opts.checkpoint_dir)


class _Streaming:
    """/exec, /attach, /portForward (GET or POST, with or without the pod UID), /run,
    /runningpods/: the paths the API server's pods/exec, attach, portforward reach."""

    def __init__(self, node: Callable[[], NodeView]) -> None:
        self.node = node

    def install(self, app: web.Application) -> None:
        for verb in ("GET", "POST"):
            app.router.add_route(verb, "/exec/{namespace}/{pod}/{container}", self.exec_)
            app.router.add_route(verb, "/exec/{namespace}/{pod}/{uid}/{container}", self.exec_)
            app.router.add_route(verb, "/attach/{namespace}/{pod}/{container}", self.attach)
            app.router.add_route(verb, "/attach/{namespace}/{pod}/{uid}/{container}", self.attach)
            app.router.add_route(verb, "/portForward/{namespace}/{pod}", self.port_forward)
            app.router.add_route(verb, "/portForward/{namespace}/{pod}/{uid}", self.port_forward)
        app.router.add_post("/run/{namespace}/{pod}/{container}", self.run)
        app.router.add_post("/run/{namespace}/{pod}/{uid}/{container}", self.run)
        app.router.add_get("/runningpods/", self.running_pods)

    @staticmethod
    def pod_or_404(view: NodeView, m: Mapping[str, str]) -> Pod:
        pod = view.get_pod_by_name(m["namespace"], m["pod"])
        if pod is None:
            raise streaming.StreamError(404, "pod does not exist")
        return pod

    @staticmethod
    def runtime(view: NodeView) -> RuntimeService:
        rt = view.runtime_service
        if rt is None:
            raise streaming.StreamError(503, "the container runtime is not available yet")
        return rt

    async def answer(
        self, request: web.Request, get_url: Callable[[NodeView], Awaitable[str]]
    ) -> web.StreamResponse:
        view = self.node()
        try:
            url = await get_url(view)
        except streaming.StreamError as err:
            return streaming.plain_error(err.status, err.text)
        except cri_errors.CRIError as err:  # the container lookup itself failed
            return streaming.plain_error(500, str(err))
        return await streaming.proxy_stream(request, url, view.streaming_idle_timeout)

    async def exec_(self, request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            opts = streaming.stream_options(request)
            m = request.match_info
            pod = self.pod_or_404(view, m)
            cmd = request.query.getall("command", [])
            return await streaming.exec_url(self.runtime(view), pod, m["container"], cmd, opts)

        return await self.answer(request, url)

    async def attach(self, request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            opts = streaming.stream_options(request)
            m = request.match_info
            pod = self.pod_or_404(view, m)
            uid = m.get("uid", "")
            return await streaming.attach_url(self.runtime(view), pod, uid, m["container"], opts)

        return await self.answer(request, url)

    async def port_forward(self, request: web.Request) -> web.StreamResponse:
        async def url(view: NodeView) -> str:
            ports = streaming.port_options(request)
            m = request.match_info
            pod = self.pod_or_404(view, m)
            if m.get("uid") and m["uid"] != pod["metadata"]["uid"]:
                raise streaming.StreamError(404, "pod not found")
            return await streaming.port_forward_url(self.runtime(view), pod, ports)

        return await self.answer(request, url)

    async def run(self, request: web.Request) -> web.StreamResponse:
        """POST /run: the command's output in the body (stdout, then stderr)."""
        view = self.node()
        m = request.match_info
        try:
            pod = self.pod_or_404(view, m)
            rt = self.runtime(view)
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

    async def running_pods(self, _: web.Request) -> web.Response:
        rt = self.node().runtime_service
        items: list[dict[str, Any]] = []
        if rt is not None:
            try:
                items = await runtime_pods(rt)
            except cri_errors.CRIError as err:
                return web.Response(status=500, text=str(err))
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return web.Response(body=orjson.dumps(body), content_type="application/json")


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

    def pod_for(
        lbl: Mapping[str, str], meta_name: str, meta_ns: str, meta_uid: str
    ) -> dict[str, Any]:
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
    the log itself streams as chunked text/plain. A follow that writes nothing
    for streamingConnectionIdleTimeout is ended, like an idle exec stream."""
    try:
        opts = parse_options(request.query)
    except LogOptionsError as err:
        return web.Response(status=422, text=str(err))
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    resp.enable_chunked_encoding()
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    async def write(data: bytes) -> None:
        last[0] = loop.time()
        if not resp.prepared:
            await resp.prepare(request)
        await resp.write(data)

    m = request.match_info
    idle = node.streaming_idle_timeout if opts.follow else 0.0
    stream = node.container_logs(m["namespace"], m["pod"], m["container"], opts, write)
    try:
        await _until_idle(stream, last, idle, request.path)
    except LogTargetError as err:
        if resp.prepared:  # the status line is gone: end the stream
            log.warning("container logs %s: %s", request.path, err)
            return resp
        return web.Response(status=err.status, text=str(err))
    if not resp.prepared:
        await resp.prepare(request)  # an empty log is an empty 200
    await resp.write_eof()
    return resp


async def _until_idle(stream: Awaitable[None], last: list[float], idle: float, what: str) -> None:
    """Run `stream`; with idle > 0, cancel it once nothing was written for `idle` seconds."""
    if idle <= 0:
        await stream
        return
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(stream)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, last[0] + idle - loop.time()))
            if done:
                return task.result()
            if loop.time() >= last[0] + idle:
                log.info("Closing log stream %s idle for %.0fs", what, idle)
                return
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
