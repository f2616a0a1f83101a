"""gRPC clients for a CRI runtime over a unix socket (the Go kubelet's
cri-client remote_runtime.go / remote_image.go), on grpc.aio.

Every call has a deadline: runtimeRequestTimeout, except the long-running
ones as upstream (PullImage has none; ExecSync gets its own timeout plus the
request timeout; GetContainerEvents streams). Calls fail fast with
UnavailableError while the runtime is down (no wait-for-ready), and the channel
reconnects in the background with backoff when it comes back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc import aio

from kubelet import metrics
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.api import api_pb2_grpc as pb_grpc
from kubelet.cri.errors import CRIError, from_rpc_error

log = logging.getLogger(__name__)

T = TypeVar("T")

# Responses can be large at high density (10,000 containers in one List).
MAX_MSG_SIZE = 128 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MSG_SIZE),
    ("grpc.max_send_message_length", MAX_MSG_SIZE),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 3000),
    ("grpc.enable_retries", 0),
]

_channels: dict[str, aio.Channel] = {}


def grpc_target(endpoint: str) -> str:
    """unix:///run/x.sock, unix:/run/x.sock or a bare path -> the grpc target."""
    if endpoint.startswith("unix://"):
        return endpoint
    if endpoint.startswith("unix:"):
        return "unix://" + endpoint[len("unix:") :]
    if endpoint.startswith("/"):
        return "unix://" + endpoint
    raise ValueError(f"unsupported CRI endpoint {endpoint!r}: only unix sockets are supported")


def channel_for(endpoint: str) -> aio.Channel:
    """One channel per endpoint for the process (runtime and image services share it)."""
    target = grpc_target(endpoint)
    ch = _channels.get(target)
    if ch is None:
        ch = aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        _channels[target] = ch
    return ch


class _Base:
    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.channel = channel_for(endpoint)

    async def _call(
        self,
        op: str,
        fn: Callable[..., Awaitable[T]],
        request: Any,
        timeout: float | None,
    ) -> T:
        start = time.perf_counter()
        metrics.RUNTIME_OPERATIONS.labels(op).inc()
        try:
            return await fn(request, timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as err:
            metrics.RUNTIME_OPERATIONS_ERRORS.labels(op).inc()
            raise from_rpc_error(op, err) from None
        finally:
            metrics.RUNTIME_OPERATIONS_DURATION.labels(op).observe(time.perf_counter() - start)

    async def close(self) -> None:
        target = grpc_target(self.endpoint)
        ch = _channels.pop(target, None)
        if ch is not None:
            await ch.close()


class RemoteRuntimeService(_Base):
    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        super().__init__(endpoint, timeout)
        self.stub = pb_grpc.RuntimeServiceStub(self.channel)
        # List calls that hand back the undecoded response for the native relist.
        self._list_sandbox_raw = self.channel.unary_unary(
            "/runtime.v1.RuntimeService/ListPodSandbox",
            request_serializer=pb.ListPodSandboxRequest.SerializeToString,
            response_deserializer=None,
        )
        self._list_containers_raw = self.channel.unary_unary(
            "/runtime.v1.RuntimeService/ListContainers",
            request_serializer=pb.ListContainersRequest.SerializeToString,
            response_deserializer=None,
        )

    async def version(self, api_version: str = "v1") -> pb.VersionResponse:
        return await self._call(
            "version", self.stub.Version, pb.VersionRequest(version=api_version), self.timeout
        )

    async def status(self, verbose: bool = False) -> pb.StatusResponse:
        return await self._call(
            "status", self.stub.Status, pb.StatusRequest(verbose=verbose), self.timeout
        )

    async def runtime_config(self) -> pb.RuntimeConfigResponse:
        return await self._call(
            "runtime_config", self.stub.RuntimeConfig, pb.RuntimeConfigRequest(), self.timeout
        )

    async def update_runtime_config(self, pod_cidr: str) -> None:
        req = pb.UpdateRuntimeConfigRequest(
            runtime_config=pb.RuntimeConfig(network_config=pb.NetworkConfig(pod_cidr=pod_cidr))
        )
        await self._call("update_runtime_config", self.stub.UpdateRuntimeConfig, req, self.timeout)

    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str:
        # Sandbox creation may pull the pause image: upstream allows twice the timeout.
        metrics.STARTED_PODS.inc()
        start = time.perf_counter()
        try:
            resp: pb.RunPodSandboxResponse = await self._call(
                "run_podsandbox",
                self.stub.RunPodSandbox,
                pb.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler),
                self.timeout * 2,
            )
        except CRIError:
            metrics.STARTED_PODS_ERRORS.inc()
            metrics.RUN_PODSANDBOX_ERRORS.labels(runtime_handler).inc()
            raise
        finally:
            elapsed = time.perf_counter() - start
            metrics.RUN_PODSANDBOX_DURATION.labels(runtime_handler).observe(elapsed)
        if not resp.pod_sandbox_id:
            raise CRIError("RunPodSandbox", "runtime returned an empty sandbox id")
        return str(resp.pod_sandbox_id)

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "stop_podsandbox",
            self.stub.StopPodSandbox,
            pb.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self.timeout,
        )

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await self._call(
            "remove_podsandbox",
            self.stub.RemovePodSandbox,
            pb.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self.timeout,
        )

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False
    ) -> pb.PodSandboxStatusResponse:
        return await self._call(
            "podsandbox_status",
            self.stub.PodSandboxStatus,
            pb.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose),
            self.timeout,
        )

    async def list_pod_sandbox(
        self, filter: pb.PodSandboxFilter | None = None
    ) -> list[pb.PodSandbox]:
        resp: pb.ListPodSandboxResponse = await self._call(
            "list_podsandbox",
            self.stub.ListPodSandbox,
            pb.ListPodSandboxRequest(filter=filter),
            self.timeout,
        )
        return list(resp.items)

    async def list_pod_sandbox_raw(self, filter: pb.PodSandboxFilter | None = None) -> bytes:
        return await self._call(
            "list_podsandbox",
            self._list_sandbox_raw,
            pb.ListPodSandboxRequest(filter=filter),
            self.timeout,
        )

    async def create_container(
        self, pod_sandbox_id: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig
    ) -> str:
        resp: pb.CreateContainerResponse = await self._call(
            "create_container",
            self.stub.CreateContainer,
            pb.CreateContainerRequest(
                pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
            ),
            self.timeout,
        )
        if not resp.container_id:
            raise CRIError("CreateContainer", "runtime returned an empty container id")
        return str(resp.container_id)

    async def start_container(self, container_id: str) -> None:
        await self._call(
            "start_container",
            self.stub.StartContainer,
            pb.StartContainerRequest(container_id=container_id),
            self.timeout,
        )

    async def stop_container(self, container_id: str, timeout: int) -> None:
        # The runtime may wait `timeout` seconds before killing: allow for it.
        await self._call(
            "stop_container",
            self.stub.StopContainer,
            pb.StopContainerRequest(container_id=container_id, timeout=timeout),
            self.timeout + max(0, timeout),
        )

    async def remove_container(self, container_id: str) -> None:
        await self._call(
            "remove_container",
            self.stub.RemoveContainer,
            pb.RemoveContainerRequest(container_id=container_id),
            self.timeout,
        )

    async def list_containers(self, filter: pb.ContainerFilter | None = None) -> list[pb.Container]:
        resp: pb.ListContainersResponse = await self._call(
            "list_containers",
            self.stub.ListContainers,
            pb.ListContainersRequest(filter=filter),
            self.timeout,
        )
        return list(resp.containers)

    async def list_containers_raw(self, filter: pb.ContainerFilter | None = None) -> bytes:
        return await self._call(
            "list_containers",
            self._list_containers_raw,
            pb.ListContainersRequest(filter=filter),
            self.timeout,
        )

    async def container_status(
        self, container_id: str, verbose: bool = False
    ) -> pb.ContainerStatusResponse:
        return await self._call(
            "container_status",
            self.stub.ContainerStatus,
            pb.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            self.timeout,
        )

    async def update_container_resources(
        self, container_id: str, linux: pb.LinuxContainerResources
    ) -> None:
        await self._call(
            "update_container",
            self.stub.UpdateContainerResources,
            pb.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
            self.timeout,
        )

    async def update_pod_sandbox_resources(
        self,
        pod_sandbox_id: str,
        overhead: pb.LinuxContainerResources,
        resources: pb.LinuxContainerResources,
    ) -> None:
        req = pb.UpdatePodSandboxResourcesRequest(
            pod_sandbox_id=pod_sandbox_id, overhead=overhead, resources=resources
        )
        await self._call(
            "update_podsandbox_resources", self.stub.UpdatePodSandboxResources, req, self.timeout
        )

    async def reopen_container_log(self, container_id: str) -> None:
        await self._call(
            "reopen_container_log",
            self.stub.ReopenContainerLog,
            pb.ReopenContainerLogRequest(container_id=container_id),
            self.timeout,
        )

    async def exec_sync(
        self, container_id: str, cmd: list[str], timeout: float
    ) -> pb.ExecSyncResponse:
        # Upstream: the command's own timeout plus the request timeout.
        deadline = (timeout + self.timeout) if timeout > 0 else None
        return await self._call(
            "exec_sync",
            self.stub.ExecSync,
            pb.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=int(timeout)),
            deadline,
        )

    async def exec(
        self, container_id: str, cmd: list[str], *, tty: bool, stdin: bool, stdout: bool,
        stderr: bool,
    ) -> str:  # fmt: skip
        req = pb.ExecRequest(
            container_id=container_id, cmd=cmd, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
        )
        resp: pb.ExecResponse = await self._call("exec", self.stub.Exec, req, self.timeout)
        return _stream_url("Exec", resp.url)

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        req = pb.AttachRequest(
            container_id=container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
        )
        resp: pb.AttachResponse = await self._call("attach", self.stub.Attach, req, self.timeout)
        return _stream_url("Attach", resp.url)

    async def port_forward(self, pod_sandbox_id: str, ports: list[int]) -> str:
        req = pb.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=ports)
        resp: pb.PortForwardResponse = await self._call(
            "port_forward", self.stub.PortForward, req, self.timeout
        )
        return _stream_url("PortForward", resp.url)

    async def checkpoint_container(self, container_id: str, location: str, timeout: float) -> None:
        """CheckpointContainer with the larger of `timeout` and the request
        timeout (whole seconds, also what the runtime is told), as cri-client."""
        if timeout < 0:
            raise ValueError("CheckpointContainer requires the timeout value to be > 0")
        seconds = max(int(timeout), int(self.timeout))
        req = pb.CheckpointContainerRequest(
            container_id=container_id, location=location, timeout=seconds
        )
        await self._call("checkpoint_container", self.stub.CheckpointContainer, req, seconds)

    async def container_stats(self, container_id: str) -> pb.ContainerStats:
        resp: pb.ContainerStatsResponse = await self._call(
            "container_stats",
            self.stub.ContainerStats,
            pb.ContainerStatsRequest(container_id=container_id),
            self.timeout,
        )
        return resp.stats

    async def list_container_stats(
        self, filter: pb.ContainerStatsFilter | None = None
    ) -> list[pb.ContainerStats]:
        resp: pb.ListContainerStatsResponse = await self._call(
            "list_container_stats",
            self.stub.ListContainerStats,
            pb.ListContainerStatsRequest(filter=filter),
            self.timeout,
        )
        return list(resp.stats)

    async def list_pod_sandbox_stats(
        self, filter: pb.PodSandboxStatsFilter | None = None
    ) -> list[pb.PodSandboxStats]:
        resp: pb.ListPodSandboxStatsResponse = await self._call(
            "list_podsandbox_stats",
            self.stub.ListPodSandboxStats,
            pb.ListPodSandboxStatsRequest(filter=filter),
            self.timeout,
        )
        return list(resp.stats)

    async def get_container_events(
        self, on_connected: Callable[[], None] | None = None
    ) -> AsyncIterator[pb.ContainerEventResponse]:
        """The runtime's event stream; raises a CRIError when it breaks.
        on_connected runs once the request is out on a connection, before any
        event (upstream's connection callback: the evented PLEG counts it)."""
        call = self.stub.GetContainerEvents(pb.GetEventsRequest(), wait_for_ready=False)
        try:
            await call.wait_for_connection()
            if on_connected is not None:
                on_connected()
            async for ev in call:
                yield ev
        except grpc.RpcError as err:
            raise from_rpc_error("GetContainerEvents", err) from None
        finally:
            call.cancel()


def _stream_url(method: str, url: str) -> str:
    if not url:
        raise CRIError(method, "URL is not set")  # as upstream's cri-client
    return str(url)


class RemoteImageService(_Base):
    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        super().__init__(endpoint, timeout)
        self.stub = pb_grpc.ImageServiceStub(self.channel)

    async def list_images(self, filter: pb.ImageFilter | None = None) -> list[pb.Image]:
        resp: pb.ListImagesResponse = await self._call(
            "list_images", self.stub.ListImages, pb.ListImagesRequest(filter=filter), self.timeout
        )
        return list(resp.images)

    async def image_status(self, image: pb.ImageSpec, verbose: bool = False) -> pb.Image | None:
        resp: pb.ImageStatusResponse = await self._call(
            "image_status",
            self.stub.ImageStatus,
            pb.ImageStatusRequest(image=image, verbose=verbose),
            self.timeout,
        )
        return resp.image if resp.HasField("image") and resp.image.id else None

    async def pull_image(
        self,
        image: pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        # Pulls are long-running: no deadline, as upstream.
        resp: pb.PullImageResponse = await self._call(
            "pull_image",
            self.stub.PullImage,
            pb.PullImageRequest(image=image, auth=auth, sandbox_config=sandbox_config),
            None,
        )
        if not resp.image_ref:
            raise CRIError("PullImage", f"image ref for {image.image!r} is empty")
        return str(resp.image_ref)

    async def remove_image(self, image: pb.ImageSpec) -> None:
        await self._call(
            "remove_image", self.stub.RemoveImage, pb.RemoveImageRequest(image=image), self.timeout
        )

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return await self._call(
            "image_fs_info", self.stub.ImageFsInfo, pb.ImageFsInfoRequest(), self.timeout
        )


async def runtime_ready(rt: RemoteRuntimeService) -> str | None:
    """None when the runtime reports RuntimeReady and NetworkReady, else the reason."""
    try:
        resp = await rt.status()
    except CRIError as err:
        return f"container runtime is down: {err}"
    conds = {c.type: c for c in resp.status.conditions}
    for ctype in ("RuntimeReady", "NetworkReady"):
        c = conds.get(ctype)
        if c is None or not c.status:
            reason = f"{c.reason}: {c.message}" if c is not None else "missing"
            if ctype == "RuntimeReady":
                return f"container runtime status check may not have completed yet: {reason}"
            return f"container runtime network not ready: NetworkReady=false reason:{reason}"
    return None
