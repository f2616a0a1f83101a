"""The gRPC face of the simulated runtime: runtime.v1 RuntimeService and ImageService."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from grpc import aio

from kubelet.cri.api import api_pb2 as pb
from kubelet.simruntime.behavior import exec_sync
from kubelet.simruntime.state import (
    RUNNING,
    Container,
    Options,
    Runtime,
    Sandbox,
    SimError,
    normalize_image,
    now_ns,
)

log = logging.getLogger(__name__)

VERSION = "0.1.0"


def _serialize(msg: bytes | Message) -> bytes:
    # Handlers may answer with bytes that were serialized (and cached) already.
    return msg if isinstance(msg, bytes) else msg.SerializeToString()


async def _unimplemented(ctx: aio.ServicerContext, method: str) -> None:
    """What grpc-go answers for a method the server does not have (an older
    containerd); aborts the call."""
    await ctx.abort(
        grpc.StatusCode.UNIMPLEMENTED,
        f"unknown method {method} for service runtime.v1.RuntimeService",
    )


def _match_labels(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class SimRuntime:
    def __init__(self, opts: Options) -> None:
        self.rt = Runtime(opts, asyncio.get_running_loop())
        self._cache: dict[str, tuple[int, bytes]] = {}
        self.list_calls = 0
        self.list_seconds = 0.0  # server-side time spent answering List calls

    # ------------------------------------------------------------- plumbing
    async def _guard(self, fn: Callable[[], Any], context: aio.ServicerContext) -> Any:
        try:
            res = fn()
            if asyncio.iscoroutine(res):
                res = await res
            return res
        except SimError as err:
            await context.abort(getattr(grpc.StatusCode, err.code), err.message)
        except (ValueError, TypeError, KeyError) as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {err}")

    def _cached(self, key: str, build: Callable[[], bytes]) -> bytes:
        hit = self._cache.get(key)
        if hit is not None and hit[0] == self.rt.generation:
            return hit[1]
        data = build()
        self._cache[key] = (self.rt.generation, data)
        return data

    # ------------------------------------------------------------ runtime
    async def Version(self, req: pb.VersionRequest, ctx: aio.ServicerContext) -> pb.VersionResponse:
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name="simruntime",
            runtime_version=VERSION,
            runtime_api_version="v1",
        )

    async def Status(self, req: pb.StatusRequest, ctx: aio.ServicerContext) -> pb.StatusResponse:
        return pb.StatusResponse(
            status=pb.RuntimeStatus(
                conditions=[
                    pb.RuntimeCondition(type="RuntimeReady", status=True),
                    pb.RuntimeCondition(type="NetworkReady", status=True),
                ]
            ),
            runtime_handlers=[pb.RuntimeHandler(name="", features=pb.RuntimeHandlerFeatures())],
            features=pb.RuntimeFeatures(
                supplemental_groups_policy=self.rt.opts.supplemental_groups_policy
            )
            if self.rt.opts.supplemental_groups_policy
            else None,
        )

    async def RuntimeConfig(
        self, req: pb.RuntimeConfigRequest, ctx: aio.ServicerContext
    ) -> pb.RuntimeConfigResponse:
        driver = self.rt.opts.cgroup_driver
        if not driver:
            await ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "method RuntimeConfig not implemented")
        return pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(
                cgroup_driver=pb.SYSTEMD if driver == "systemd" else pb.CGROUPFS
            )
        )

    async def UpdateRuntimeConfig(
        self, req: pb.UpdateRuntimeConfigRequest, ctx: aio.ServicerContext
    ) -> pb.UpdateRuntimeConfigResponse:
        return pb.UpdateRuntimeConfigResponse()

    async def RunPodSandbox(
        self, req: pb.RunPodSandboxRequest, ctx: aio.ServicerContext
    ) -> pb.RunPodSandboxResponse:
        sid = await self._guard(
            lambda: self.rt.run_pod_sandbox(req.config, req.runtime_handler), ctx
        )
        return pb.RunPodSandboxResponse(pod_sandbox_id=sid)

    async def StopPodSandbox(
        self, req: pb.StopPodSandboxRequest, ctx: aio.ServicerContext
    ) -> pb.StopPodSandboxResponse:
        if not req.pod_sandbox_id:
            await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "PodSandboxId should not be empty")
        await self._guard(lambda: self.rt.stop_pod_sandbox(req.pod_sandbox_id), ctx)
        return pb.StopPodSandboxResponse()

    async def RemovePodSandbox(
        self, req: pb.RemovePodSandboxRequest, ctx: aio.ServicerContext
    ) -> pb.RemovePodSandboxResponse:
        if not req.pod_sandbox_id:
            await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "PodSandboxId should not be empty")
        await self._guard(lambda: self.rt.remove_pod_sandbox(req.pod_sandbox_id), ctx)
        return pb.RemovePodSandboxResponse()

    async def PodSandboxStatus(
        self, req: pb.PodSandboxStatusRequest, ctx: aio.ServicerContext
    ) -> pb.PodSandboxStatusResponse:
        sb = await self._guard(lambda: self.rt._sandbox(req.pod_sandbox_id), ctx)
        statuses = [
            self.rt.containers[c].status() for c in sb.containers if c in self.rt.containers
        ]
        # Verbose: the sandbox's config as it stands, as containerd's "info" holds it.
        info = {"info": json.dumps({"config": json_format.MessageToDict(sb.config)})}
        return pb.PodSandboxStatusResponse(
            status=sb.status(),
            containers_statuses=statuses,
            timestamp=now_ns(),
            info=info if req.verbose else None,
        )

    async def ListPodSandbox(
        self, req: pb.ListPodSandboxRequest, ctx: aio.ServicerContext
    ) -> pb.ListPodSandboxResponse | bytes:
        t = time.perf_counter()
        f = req.filter
        if not req.HasField("filter"):
            # Each sandbox keeps its own encoded bytes: a change re-encodes one item.
            data = self._cached(
                "sandboxes", lambda: b"".join(s.framed() for s in self.rt.sandboxes.values())
            )
        else:
            items = []
            uid = f.label_selector.get("io.kubernetes.pod.uid")
            if f.id:
                cands = [self.rt.sandboxes[f.id]] if f.id in self.rt.sandboxes else []
            elif uid is not None:
                # The kubelet asks per pod: an index keeps that O(1), not O(sandboxes).
                cands = [self.rt.sandboxes[i] for i in self.rt.sandboxes_by_pod_uid.get(uid, ())]
            else:
                cands = list(self.rt.sandboxes.values())
            for s in cands:
                if f.HasField("state") and s.state != f.state.state:
                    continue
                if not _match_labels(s.config.labels, f.label_selector):
                    continue
                items.append(s.summary())
            data = pb.ListPodSandboxResponse(items=items).SerializeToString()
        self.list_calls += 1
        self.list_seconds += time.perf_counter() - t
        return data

    async def CreateContainer(
        self, req: pb.CreateContainerRequest, ctx: aio.ServicerContext
    ) -> pb.CreateContainerResponse:
        cid = await self._guard(
            lambda: self.rt.create_container(req.pod_sandbox_id, req.config), ctx
        )
        return pb.CreateContainerResponse(container_id=cid)

    async def StartContainer(
        self, req: pb.StartContainerRequest, ctx: aio.ServicerContext
    ) -> pb.StartContainerResponse:
        await self._guard(lambda: self.rt.start_container(req.container_id), ctx)
        return pb.StartContainerResponse()

    async def StopContainer(
        self, req: pb.StopContainerRequest, ctx: aio.ServicerContext
    ) -> pb.StopContainerResponse:
        await self._guard(lambda: self.rt.stop_container(req.container_id, int(req.timeout)), ctx)
        return pb.StopContainerResponse()

    async def RemoveContainer(
        self, req: pb.RemoveContainerRequest, ctx: aio.ServicerContext
    ) -> pb.RemoveContainerResponse:
        if not req.container_id:
            await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "ContainerId should not be empty")
        await self._guard(lambda: self.rt.remove_container(req.container_id), ctx)
        return pb.RemoveContainerResponse()

    async def ListContainers(
        self, req: pb.ListContainersRequest, ctx: aio.ServicerContext
    ) -> pb.ListContainersResponse | bytes:
        t = time.perf_counter()
        rt = self.rt
        if not req.HasField("filter"):
            data = self._cached(
                "containers", lambda: b"".join(c.framed() for c in rt.containers.values())
            )
        else:
            f = req.filter
            if f.id:
                cands = [rt.containers[f.id]] if f.id in rt.containers else []
            elif f.pod_sandbox_id:
                sb = rt.sandboxes.get(f.pod_sandbox_id)
                cands = [rt.containers[i] for i in sb.containers] if sb else []
            elif "io.kubernetes.pod.uid" in f.label_selector:
                ids = rt.by_pod_uid.get(f.label_selector["io.kubernetes.pod.uid"], ())
                cands = [rt.containers[i] for i in ids]
            else:
                cands = list(rt.containers.values())
            out = [
                c.summary()
                for c in cands
                if (not f.HasField("state") or c.state == f.state.state)
                and _match_labels(c.config.labels, f.label_selector)
            ]
            data = pb.ListContainersResponse(containers=out).SerializeToString()
        self.list_calls += 1
        self.list_seconds += time.perf_counter() - t
        return data

    async def ContainerStatus(
        self, req: pb.ContainerStatusRequest, ctx: aio.ServicerContext
    ) -> pb.ContainerStatusResponse:
        c = await self._guard(lambda: self.rt._container(req.container_id), ctx)
        if not req.verbose:
            return pb.ContainerStatusResponse(status=c.status())
        # Verbose: the config it was created with (CDI devices, mounts...), as
        # containerd's "info" holds it.
        info = {"info": json.dumps({"config": json_format.MessageToDict(c.config)})}
        return pb.ContainerStatusResponse(status=c.status(), info=info)

    async def UpdateContainerResources(
        self, req: pb.UpdateContainerResourcesRequest, ctx: aio.ServicerContext
    ) -> pb.UpdateContainerResourcesResponse:
        c = await self._guard(lambda: self.rt._container(req.container_id), ctx)
        if req.HasField("linux"):
            c.config.linux.resources.CopyFrom(req.linux)
            self.rt._changed()
        return pb.UpdateContainerResourcesResponse()

    async def UpdatePodSandboxResources(
        self, req: pb.UpdatePodSandboxResourcesRequest, ctx: aio.ServicerContext
    ) -> pb.UpdatePodSandboxResourcesResponse:
        if not self.rt.opts.sandbox_resources:
            await _unimplemented(ctx, "UpdatePodSandboxResources")
        sb = await self._guard(lambda: self.rt._sandbox(req.pod_sandbox_id), ctx)
        linux = sb.config.linux
        linux.overhead.CopyFrom(req.overhead)
        linux.resources.CopyFrom(req.resources)
        return pb.UpdatePodSandboxResourcesResponse()

    async def ReopenContainerLog(
        self, req: pb.ReopenContainerLogRequest, ctx: aio.ServicerContext
    ) -> pb.ReopenContainerLogResponse:
        c = await self._guard(lambda: self.rt._container(req.container_id), ctx)
        if c.state != RUNNING:
            await ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "container is not running")
        if c.log_path:
            open(c.log_path, "ab").close()  # noqa: ASYNC230 (creates an empty file: no wait)
        return pb.ReopenContainerLogResponse()

    async def ExecSync(
        self, req: pb.ExecSyncRequest, ctx: aio.ServicerContext
    ) -> pb.ExecSyncResponse:
        c = await self._guard(lambda: self.rt._container(req.container_id), ctx)
        if c.state != RUNNING:
            await ctx.abort(grpc.StatusCode.UNKNOWN, f"container {c.id} is not running")
        sb = self.rt.sandboxes.get(c.sandbox_id)
        hostname = (sb.config.hostname or sb.config.metadata.name) if sb else "localhost"
        return exec_sync(list(req.cmd), hostname)

    async def Exec(self, req: pb.ExecRequest, ctx: aio.ServicerContext) -> Any:
        await ctx.abort(
            grpc.StatusCode.UNIMPLEMENTED, "exec is not supported by the simulated runtime"
        )

    async def Attach(self, req: pb.AttachRequest, ctx: aio.ServicerContext) -> Any:
        await ctx.abort(
            grpc.StatusCode.UNIMPLEMENTED, "attach is not supported by the simulated runtime"
        )

    async def PortForward(self, req: pb.PortForwardRequest, ctx: aio.ServicerContext) -> Any:
        await ctx.abort(
            grpc.StatusCode.UNIMPLEMENTED, "port-forward is not supported by the simulated runtime"
        )

    def _stats(self, c: Container) -> pb.ContainerStats:
        ts = now_ns()
        running_ns = (
            ((ts - c.started_at) if c.state == RUNNING else max(0, c.finished_at - c.started_at))
            if c.started_at
            else 0
        )
        # 1% of a core while running; ~8 MiB plus a little per log line.
        cpu = running_ns // 100
        mem = 8 * 1024 * 1024 + (len(c.id) * 1024 if c.state == RUNNING else 0)
        return pb.ContainerStats(
            attributes=pb.ContainerAttributes(
                id=c.id,
                metadata=c.config.metadata,
                labels=c.config.labels,
                annotations=c.config.annotations,
            ),
            cpu=pb.CpuUsage(
                timestamp=ts,
                usage_core_nano_seconds=pb.UInt64Value(value=cpu),
                usage_nano_cores=pb.UInt64Value(value=10_000_000 if c.state == RUNNING else 0),
            ),
            memory=pb.MemoryUsage(
                timestamp=ts,
                working_set_bytes=pb.UInt64Value(value=mem),
                usage_bytes=pb.UInt64Value(value=mem),
                rss_bytes=pb.UInt64Value(value=mem // 2),
            ),
            writable_layer=pb.FilesystemUsage(
                timestamp=ts,
                used_bytes=pb.UInt64Value(value=4096),
                inodes_used=pb.UInt64Value(value=1),
            ),
        )

    async def CheckpointContainer(
        self, req: pb.CheckpointContainerRequest, ctx: aio.ServicerContext
    ) -> pb.CheckpointContainerResponse:
        if not self.rt.opts.checkpoint:
            await _unimplemented(ctx, "CheckpointContainer")
        await self._guard(lambda: self.rt.checkpoint_container(req.container_id, req.location), ctx)
        return pb.CheckpointContainerResponse()

    async def ContainerStats(
        self, req: pb.ContainerStatsRequest, ctx: aio.ServicerContext
    ) -> pb.ContainerStatsResponse:
        c = await self._guard(lambda: self.rt._container(req.container_id), ctx)
        return pb.ContainerStatsResponse(stats=self._stats(c))

    async def ListContainerStats(
        self, req: pb.ListContainerStatsRequest, ctx: aio.ServicerContext
    ) -> pb.ListContainerStatsResponse:
        f = req.filter
        out = [
            self._stats(c)
            for c in self.rt.containers.values()
            if (not f.id or c.id == f.id)
            and (not f.pod_sandbox_id or c.sandbox_id == f.pod_sandbox_id)
            and _match_labels(c.config.labels, f.label_selector)
        ]
        return pb.ListContainerStatsResponse(stats=out)

    async def PodSandboxStats(
        self, req: pb.PodSandboxStatsRequest, ctx: aio.ServicerContext
    ) -> pb.PodSandboxStatsResponse:
        sb = await self._guard(lambda: self.rt._sandbox(req.pod_sandbox_id), ctx)
        return pb.PodSandboxStatsResponse(stats=self._sandbox_stats(sb))

    def _sandbox_stats(self, sb: Sandbox) -> pb.PodSandboxStats:
        cs = [self._stats(self.rt.containers[i]) for i in sb.containers if i in self.rt.containers]
        ts = now_ns()
        return pb.PodSandboxStats(
            attributes=pb.PodSandboxAttributes(
                id=sb.id,
                metadata=sb.config.metadata,
                labels=sb.config.labels,
                annotations=sb.config.annotations,
            ),
            linux=pb.LinuxPodSandboxStats(
                cpu=pb.CpuUsage(
                    timestamp=ts,
                    usage_core_nano_seconds=pb.UInt64Value(
                        value=sum(c.cpu.usage_core_nano_seconds.value for c in cs)
                    ),
                ),
                memory=pb.MemoryUsage(
                    timestamp=ts,
                    working_set_bytes=pb.UInt64Value(
                        value=sum(c.memory.working_set_bytes.value for c in cs)
                    ),
                ),
                containers=cs,
            ),
        )

    async def ListPodSandboxStats(
        self, req: pb.ListPodSandboxStatsRequest, ctx: aio.ServicerContext
    ) -> pb.ListPodSandboxStatsResponse:
        f = req.filter
        out = [
            self._sandbox_stats(sb)
            for sb in self.rt.sandboxes.values()
            if (not f.id or sb.id == f.id) and _match_labels(sb.config.labels, f.label_selector)
        ]
        return pb.ListPodSandboxStatsResponse(stats=out)

    async def GetContainerEvents(
        self, req: pb.GetEventsRequest, ctx: aio.ServicerContext
    ) -> AsyncIterator[pb.ContainerEventResponse]:
        q: asyncio.Queue[pb.ContainerEventResponse] = asyncio.Queue(maxsize=10000)

        def push(ev: pb.ContainerEventResponse) -> None:
            try:
                q.put_nowait(ev)
            except asyncio.QueueFull:
                pass  # a consumer this far behind has to relist anyway

        self.rt.listeners.append(push)
        try:
            while True:
                yield await q.get()
        finally:
            self.rt.listeners.remove(push)

    # ------------------------------------------------------------- images
    async def ListImages(
        self, req: pb.ListImagesRequest, ctx: aio.ServicerContext
    ) -> pb.ListImagesResponse:
        want = req.filter.image.image if req.HasField("filter") else ""
        imgs = [
            i
            for i in self.rt.images.values()
            if not want or normalize_image(want) in i.repo_tags or want == i.id
        ]
        return pb.ListImagesResponse(images=imgs)

    async def ImageStatus(
        self, req: pb.ImageStatusRequest, ctx: aio.ServicerContext
    ) -> pb.ImageStatusResponse:
        ref = req.image.image
        if not ref:
            await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "image reference should not be empty")
        img = self.rt.images.get(normalize_image(ref)) or self.rt._image_by_id(ref)
        return pb.ImageStatusResponse(image=img) if img else pb.ImageStatusResponse()

    async def PullImage(
        self, req: pb.PullImageRequest, ctx: aio.ServicerContext
    ) -> pb.PullImageResponse:
        ref = req.image.image
        if not ref:
            await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "image reference should not be empty")
        if self.rt.opts.pull_delay:
            await asyncio.sleep(self.rt.opts.pull_delay)
        if self.rt.image_missing(ref):
            norm = normalize_image(ref)
            await ctx.abort(
                grpc.StatusCode.NOT_FOUND,
                f'failed to pull and unpack image "{norm}": failed to resolve reference '
                f'"{norm}": {norm}: not found',
            )
        img = self.rt.images.get(normalize_image(ref)) or self.rt.add_image(ref)
        self.rt._changed()
        return pb.PullImageResponse(image_ref=img.id)

    async def RemoveImage(
        self, req: pb.RemoveImageRequest, ctx: aio.ServicerContext
    ) -> pb.RemoveImageResponse:
        ref = req.image.image
        img = self.rt.images.get(normalize_image(ref)) or self.rt._image_by_id(ref)
        if img is not None:
            for k in [k for k, v in self.rt.images.items() if v.id == img.id]:
                del self.rt.images[k]
        return pb.RemoveImageResponse()

    async def ImageFsInfo(
        self, req: pb.ImageFsInfoRequest, ctx: aio.ServicerContext
    ) -> pb.ImageFsInfoResponse:
        used = sum(i.size for i in self.rt.images.values())
        return pb.ImageFsInfoResponse(
            image_filesystems=[
                pb.FilesystemUsage(
                    timestamp=now_ns(),
                    fs_id=pb.FilesystemIdentifier(mountpoint=self.rt.opts.image_fs),
                    used_bytes=pb.UInt64Value(value=used),
                    inodes_used=pb.UInt64Value(value=len(self.rt.images)),
                )
            ]
        )


_REQUESTS: dict[str, Any] = {
    "Version": pb.VersionRequest,
    "Status": pb.StatusRequest,
    "RuntimeConfig": pb.RuntimeConfigRequest,
    "UpdateRuntimeConfig": pb.UpdateRuntimeConfigRequest,
    "RunPodSandbox": pb.RunPodSandboxRequest,
    "StopPodSandbox": pb.StopPodSandboxRequest,
    "RemovePodSandbox": pb.RemovePodSandboxRequest,
    "PodSandboxStatus": pb.PodSandboxStatusRequest,
    "ListPodSandbox": pb.ListPodSandboxRequest,
    "CreateContainer": pb.CreateContainerRequest,
    "StartContainer": pb.StartContainerRequest,
    "StopContainer": pb.StopContainerRequest,
    "RemoveContainer": pb.RemoveContainerRequest,
    "ListContainers": pb.ListContainersRequest,
    "ContainerStatus": pb.ContainerStatusRequest,
    "UpdateContainerResources": pb.UpdateContainerResourcesRequest,
    "UpdatePodSandboxResources": pb.UpdatePodSandboxResourcesRequest,
    "ReopenContainerLog": pb.ReopenContainerLogRequest,
    "ExecSync": pb.ExecSyncRequest,
    "Exec": pb.ExecRequest,
    "Attach": pb.AttachRequest,
    "PortForward": pb.PortForwardRequest,
    "ContainerStats": pb.ContainerStatsRequest,
    "ListContainerStats": pb.ListContainerStatsRequest,
    "PodSandboxStats": pb.PodSandboxStatsRequest,
    "ListPodSandboxStats": pb.ListPodSandboxStatsRequest,
    "CheckpointContainer": pb.CheckpointContainerRequest,
}
_IMAGE_REQUESTS: dict[str, Any] = {
    "ListImages": pb.ListImagesRequest,
    "ImageStatus": pb.ImageStatusRequest,
    "PullImage": pb.PullImageRequest,
    "RemoveImage": pb.RemoveImageRequest,
    "ImageFsInfo": pb.ImageFsInfoRequest,
}


def handlers(sim: SimRuntime) -> list[grpc.GenericRpcHandler]:
    rt = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(sim, name), request_deserializer=req.FromString, response_serializer=_serialize
        )
        for name, req in _REQUESTS.items()
    }
    rt["GetContainerEvents"] = grpc.unary_stream_rpc_method_handler(
        sim.GetContainerEvents,
        request_deserializer=pb.GetEventsRequest.FromString,
        response_serializer=_serialize,
    )
    img = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(sim, name), request_deserializer=req.FromString, response_serializer=_serialize
        )
        for name, req in _IMAGE_REQUESTS.items()
    }
    return [
        grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", rt),
        grpc.method_handlers_generic_handler("runtime.v1.ImageService", img),
    ]


async def serve(listen: str, opts: Options) -> tuple[aio.Server, SimRuntime]:
    path = listen.removeprefix("unix://")
    if os.path.exists(path):  # noqa: ASYNC240 (once, at start)
        os.unlink(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    sim = SimRuntime(opts)
    server = aio.server(
        options=[
            ("grpc.max_receive_message_length", 128 * 1024 * 1024),
            ("grpc.max_send_message_length", 128 * 1024 * 1024),
            # gRPC core cancels new calls once more than these wait for the
            # Python server to pick them up (defaults 1,000 and 3,000): a kubelet
            # stopping 10,000 pods at once got thousands of CANCELLED. Go runtimes
            # (containerd) have no such limit, and the simulated one stands in for them.
            ("grpc.server.max_pending_requests", 1 << 20),
            ("grpc.server.max_pending_requests_hard_limit", 1 << 20),
        ]
    )
    server.add_generic_rpc_handlers(handlers(sim))
    server.add_insecure_port("unix://" + path)
    await server.start()
    log.info("simulated CRI runtime listening on unix://%s", path)
    return server, sim
