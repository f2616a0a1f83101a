"""In-memory fakes of the CRI services for unit tests.

They implement kubelet.cri.types.RuntimeService / ImageService with the same
state machine as a real runtime (created -> running -> exited, sandboxes go
NOTREADY when stopped, removal rules), record every call in `.calls` as
(method, args), and fail on demand:

    rt = FakeRuntimeService()
    rt.inject_error("start_container", errors.UnavailableError("StartContainer", "down"), times=2)

Containers do nothing by themselves; tests move them with `set_exited(id, code)`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._errors: dict[str, list[BaseException]] = {}

    def inject_error(self, method: str, exc: BaseException, times: int = 1) -> None:
        """The next `times` calls of `method` raise `exc` (after being recorded)."""
        self._errors.setdefault(method, []).extend([exc] * times)

    def _call(self, method: str, *args: Any) -> None:
        self.calls.append((method, args))
        pending = self._errors.get(method)
        if pending:
            raise pending.pop(0)

    def called(self, method: str) -> list[tuple[Any, ...]]:
        return [a for m, a in self.calls if m == method]


def _match(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class FakeRuntimeService(_Recorder):
    def __init__(self, runtime_name: str = "fake") -> None:
        super().__init__()
        self.runtime_name = runtime_name
        self.sandboxes: dict[str, pb.PodSandboxStatus] = {}
        self.containers: dict[str, pb.ContainerStatus] = {}
        self.container_sandbox: dict[str, str] = {}
        self._next = 0
        self._ip = 1
        # Where exec/attach/port-forward URLs point: tests run a streaming server there.
        self.streaming_base = "http://127.0.0.1:1"
        # The handlers Status names (none: an old runtime), as containerd 2 does.
        self.runtime_handlers: list[pb.RuntimeHandler] = []
        self.features: pb.RuntimeFeatures | None = None  # Status's features (None: not sent)

    def _id(self, prefix: str) -> str:
        self._next += 1
        return f"{prefix}{self._next:06d}"

    async def version(self, api_version: str = "v1") -> pb.VersionResponse:
        self._call("version", api_version)
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name=self.runtime_name,
            runtime_version="1.0",
            runtime_api_version="v1",
        )

    async def status(self, verbose: bool = False) -> pb.StatusResponse:
        self._call("status", verbose)
        conds = [pb.RuntimeCondition(type=t, status=True) for t in ("RuntimeReady", "NetworkReady")]
        return pb.StatusResponse(
            status=pb.RuntimeStatus(conditions=conds),
            runtime_handlers=self.runtime_handlers,
            features=self.features,
        )

    async def runtime_config(self) -> pb.RuntimeConfigResponse:
        self._call("runtime_config")
        return pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CGROUPFS)
        )

    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str:
        self._call("run_pod_sandbox", config, runtime_handler)
        if not config.metadata.uid or not config.metadata.name:
            raise errors.InvalidArgumentError("RunPodSandbox", "metadata is required")
        sid = self._id("sb")
        self._ip += 1
        ns_opts = config.linux.security_context.namespace_options
        self.sandboxes[sid] = pb.PodSandboxStatus(
            id=sid,
            metadata=config.metadata,
            state=pb.SANDBOX_READY,
            created_at=time.time_ns(),
            network=pb.PodSandboxNetworkStatus(
                ip="" if ns_opts.network == pb.NODE else f"10.0.0.{self._ip}"
            ),
            linux=pb.LinuxPodSandboxStatus(namespaces=pb.Namespace(options=ns_opts)),
            labels=config.labels,
            annotations=config.annotations,
            runtime_handler=runtime_handler,
        )
        return sid

    def _sandbox(self, method: str, sid: str) -> pb.PodSandboxStatus:
        sb = self.sandboxes.get(sid)
        if sb is None:
            raise errors.NotFoundError(method, f"sandbox {sid} not found")
        return sb

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        self._call("stop_pod_sandbox", pod_sandbox_id)
        sb = self.sandboxes.get(pod_sandbox_id)
        if sb is None:
            return
        for cid, s in self.container_sandbox.items():
            if s == pod_sandbox_id and self.containers[cid].state == pb.CONTAINER_RUNNING:
                self.set_exited(cid, 137)
        sb.state = pb.SANDBOX_NOTREADY

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        self._call("remove_pod_sandbox", pod_sandbox_id)
        for cid in [c for c, s in self.container_sandbox.items() if s == pod_sandbox_id]:
            self.containers.pop(cid, None)
            self.container_sandbox.pop(cid, None)
        self.sandboxes.pop(pod_sandbox_id, None)

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False
    ) -> pb.PodSandboxStatusResponse:
        self._call("pod_sandbox_status", pod_sandbox_id)
        return pb.PodSandboxStatusResponse(status=self._sandbox("PodSandboxStatus", pod_sandbox_id))

    def _sandbox_items(self, f: pb.PodSandboxFilter | None) -> list[pb.PodSandbox]:
        out = []
        for s in self.sandboxes.values():
            if f is not None:
                if f.id and s.id != f.id:
                    continue
                if f.HasField("state") and s.state != f.state.state:
                    continue
                if not _match(s.labels, f.label_selector):
                    continue
            out.append(
                pb.PodSandbox(
                    id=s.id,
                    metadata=s.metadata,
                    state=s.state,
                    created_at=s.created_at,
                    labels=s.labels,
                    annotations=s.annotations,
                )
            )
        return out

    async def list_pod_sandbox(
        self, filter: pb.PodSandboxFilter | None = None
    ) -> list[pb.PodSandbox]:
        self._call("list_pod_sandbox", filter)
        return self._sandbox_items(filter)

    async def list_pod_sandbox_raw(self, filter: pb.PodSandboxFilter | None = None) -> bytes:
        self._call("list_pod_sandbox_raw", filter)
        return pb.ListPodSandboxResponse(items=self._sandbox_items(filter)).SerializeToString()

    async def create_container(
        self, pod_sandbox_id: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig
    ) -> str:
        self._call("create_container", pod_sandbox_id, config, sandbox_config)
        sb = self._sandbox("CreateContainer", pod_sandbox_id)
        if sb.state != pb.SANDBOX_READY:
            raise errors.CRIError("CreateContainer", f"sandbox {pod_sandbox_id} is not ready")
        cid = self._id("c")
        self.containers[cid] = pb.ContainerStatus(
            id=cid,
            metadata=config.metadata,
            state=pb.CONTAINER_CREATED,
            created_at=time.time_ns(),
            image=config.image,
            image_ref=config.image.image,
            labels=config.labels,
            annotations=config.annotations,
            log_path=config.log_path,
        )
        self.container_sandbox[cid] = pod_sandbox_id
        return cid

    def _container(self, method: str, cid: str) -> pb.ContainerStatus:
        c = self.containers.get(cid)
        if c is None:
            raise errors.NotFoundError(method, f"container {cid} not found")
        return c

    async def start_container(self, container_id: str) -> None:
        self._call("start_container", container_id)
        c = self._container("StartContainer", container_id)
        if c.state != pb.CONTAINER_CREATED:
            raise errors.CRIError("StartContainer", f"container {container_id} is not created")
        c.state = pb.CONTAINER_RUNNING
        c.started_at = time.time_ns()

    def set_exited(self, container_id: str, exit_code: int, reason: str = "") -> None:
        """Make a running container exit, as its process would."""
        c = self.containers[container_id]
        c.state = pb.CONTAINER_EXITED
        c.finished_at = time.time_ns()
        c.exit_code = exit_code
        c.reason = reason or ("Completed" if exit_code == 0 else "Error")

    async def stop_container(self, container_id: str, timeout: int) -> None:
        self._call("stop_container", container_id, timeout)
        c = self._container("StopContainer", container_id)
        if c.state in (pb.CONTAINER_RUNNING, pb.CONTAINER_CREATED):
            self.set_exited(container_id, 143 if c.state == pb.CONTAINER_RUNNING else 0)

    async def remove_container(self, container_id: str) -> None:
        self._call("remove_container", container_id)
        self.containers.pop(container_id, None)
        self.container_sandbox.pop(container_id, None)

    def _container_items(self, f: pb.ContainerFilter | None) -> list[pb.Container]:
        out = []
        for cid, c in self.containers.items():
            if f is not None:
                if f.id and cid != f.id:
                    continue
                if f.pod_sandbox_id and self.container_sandbox[cid] != f.pod_sandbox_id:
                    continue
                if f.HasField("state") and c.state != f.state.state:
                    continue
                if not _match(c.labels, f.label_selector):
                    continue
            out.append(
                pb.Container(
                    id=cid,
                    pod_sandbox_id=self.container_sandbox[cid],
                    metadata=c.metadata,
                    image=c.image,
                    image_ref=c.image_ref,
                    state=c.state,
                    created_at=c.created_at,
                    labels=c.labels,
                    annotations=c.annotations,
                )
            )
        return out

    async def list_containers(self, filter: pb.ContainerFilter | None = None) -> list[pb.Container]:
        self._call("list_containers", filter)
        return self._container_items(filter)

    async def list_containers_raw(self, filter: pb.ContainerFilter | None = None) -> bytes:
        self._call("list_containers_raw", filter)
        return pb.ListContainersResponse(
            containers=self._container_items(filter)
        ).SerializeToString()

    async def container_status(
        self, container_id: str, verbose: bool = False
    ) -> pb.ContainerStatusResponse:
        self._call("container_status", container_id)
        return pb.ContainerStatusResponse(status=self._container("ContainerStatus", container_id))

    async def update_container_resources(
        self, container_id: str, linux: pb.LinuxContainerResources
    ) -> None:
        self._call("update_container_resources", container_id, linux)
        self._container("UpdateContainerResources", container_id)

    async def update_pod_sandbox_resources(
        self,
        pod_sandbox_id: str,
        overhead: pb.LinuxContainerResources,
        resources: pb.LinuxContainerResources,
    ) -> None:
        self._call("update_pod_sandbox_resources", pod_sandbox_id, overhead, resources)
        self._sandbox("UpdatePodSandboxResources", pod_sandbox_id)

    async def reopen_container_log(self, container_id: str) -> None:
        self._call("reopen_container_log", container_id)
        self._container("ReopenContainerLog", container_id)

    async def exec_sync(
        self, container_id: str, cmd: list[str], timeout: float
    ) -> pb.ExecSyncResponse:
        self._call("exec_sync", container_id, cmd, timeout)
        self._container("ExecSync", container_id)
        return pb.ExecSyncResponse(
            stdout=(" ".join(cmd[1:]) + "\n").encode() if cmd[:1] == ["echo"] else b""
        )

    async def exec(
        self, container_id: str, cmd: list[str], *, tty: bool, stdin: bool, stdout: bool,
        stderr: bool,
    ) -> str:  # fmt: skip
        self._call("exec", container_id, cmd, tty, stdin, stdout, stderr)
        self._container("Exec", container_id)
        return f"{self.streaming_base}/exec/{self._id('tok')}"

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        self._call("attach", container_id, tty, stdin, stdout, stderr)
        self._container("Attach", container_id)
        return f"{self.streaming_base}/attach/{self._id('tok')}"

    async def port_forward(self, pod_sandbox_id: str, ports: list[int]) -> str:
        self._call("port_forward", pod_sandbox_id, ports)
        self._sandbox("PortForward", pod_sandbox_id)
        return f"{self.streaming_base}/portforward/{self._id('tok')}"

    async def checkpoint_container(self, container_id: str, location: str, timeout: float) -> None:
        if timeout < 0:
            raise ValueError("CheckpointContainer requires the timeout value to be > 0")
        self._call("checkpoint_container", container_id, location, timeout)
        self._container("CheckpointContainer", container_id)
        with open(location, "wb") as fh:  # noqa: ASYNC230  (a test fake, a few bytes)
            fh.write(b"fake checkpoint of " + container_id.encode())

    async def container_stats(self, container_id: str) -> pb.ContainerStats:
        self._call("container_stats", container_id)
        c = self._container("ContainerStats", container_id)
        return pb.ContainerStats(
            attributes=pb.ContainerAttributes(id=c.id, metadata=c.metadata, labels=c.labels)
        )

    async def list_container_stats(
        self, filter: pb.ContainerStatsFilter | None = None
    ) -> list[pb.ContainerStats]:
        self._call("list_container_stats", filter)
        return [
            pb.ContainerStats(attributes=pb.ContainerAttributes(id=c.id, metadata=c.metadata))
            for c in self.containers.values()
        ]

    async def list_pod_sandbox_stats(
        self, filter: pb.PodSandboxStatsFilter | None = None
    ) -> list[pb.PodSandboxStats]:
        self._call("list_pod_sandbox_stats", filter)
        return [
            pb.PodSandboxStats(attributes=pb.PodSandboxAttributes(id=s.id, metadata=s.metadata))
            for s in self.sandboxes.values()
        ]

    async def get_container_events(
        self, on_connected: Callable[[], None] | None = None
    ) -> AsyncIterator[pb.ContainerEventResponse]:
        self._call("get_container_events")
        raise errors.UnimplementedError("GetContainerEvents", "the fake runtime sends no events")
        yield  # pragma: no cover  (makes this an async generator)

    async def close(self) -> None:
        self._call("close")


class FakeImageService(_Recorder):
    def __init__(
        self, images: list[str] | None = None, missing_tags: tuple[str, ...] = ("missing",)
    ) -> None:
        super().__init__()
        self.images: dict[str, pb.Image] = {}
        self.missing_tags = missing_tags
        for ref in images or []:
            self._add(ref)

    def _add(self, ref: str) -> pb.Image:
        img = pb.Image(id=f"sha256:{abs(hash(ref)):064x}"[:71], repo_tags=[ref], size=1024)
        self.images[ref] = img
        return img

    async def list_images(self, filter: pb.ImageFilter | None = None) -> list[pb.Image]:
        self._call("list_images", filter)
        return list(self.images.values())

    async def image_status(self, image: pb.ImageSpec, verbose: bool = False) -> pb.Image | None:
        self._call("image_status", image.image)
        found = self.images.get(image.image)
        if found is None:  # as a runtime, by ID too (what PullImage answers)
            found = next((i for i in self.images.values() if i.id == image.image), None)
        return found

    async def pull_image(
        self,
        image: pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        self._call("pull_image", image.image)
        if image.image.rsplit(":", 1)[-1] in self.missing_tags:
            # containerd reports a registry miss as UNKNOWN, not NOT_FOUND.
            raise errors.CRIError(
                "PullImage", f'failed to pull and unpack image "{image.image}": not found'
            )
        return str(self._add(image.image).id)

    async def remove_image(self, image: pb.ImageSpec) -> None:
        self._call("remove_image", image.image)
        self.images.pop(image.image, None)

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        self._call("image_fs_info")
        return pb.ImageFsInfoResponse()

    async def close(self) -> None:
        self._call("close")
