"""Helpers over the CRI fakes: pods with containers at chosen creation times, a
runtime that reopens logs like a real one, an image service on a model disk."""

from __future__ import annotations

import os

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime.labels import CONTAINER_NAME, POD_UID

S = 1_000_000_000  # ns per second


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sandbox_config(uid: str, name: str = "") -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name or f"pod-{uid}", uid=uid, namespace="ns"),
        labels={POD_UID: uid},
    )


async def add_sandbox(
    rt: FakeRuntimeService, uid: str, created_s: float, ready: bool = True
) -> str:
    sid = await rt.run_pod_sandbox(sandbox_config(uid))
    rt.sandboxes[sid].created_at = int(created_s * S)
    if not ready:
        rt.sandboxes[sid].state = pb.SANDBOX_NOTREADY
    return sid


async def add_container(
    rt: FakeRuntimeService,
    sid: str,
    name: str,
    created_s: float,
    state: int = pb.CONTAINER_EXITED,
    image: str = "busybox",
    log_path: str = "",
) -> str:
    uid = rt.sandboxes[sid].metadata.uid
    cfg = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name),
        image=pb.ImageSpec(image=image),
        labels={POD_UID: uid, CONTAINER_NAME: name},
        log_path=log_path,
    )
    ready = rt.sandboxes[sid].state
    rt.sandboxes[sid].state = pb.SANDBOX_READY  # the fake creates only in ready sandboxes
    cid = await rt.create_container(sid, cfg, sandbox_config(uid))
    rt.sandboxes[sid].state = ready
    st = rt.containers[cid]
    st.created_at = int(created_s * S)
    st.state = state  # type: ignore[assignment]
    rt.calls.clear()
    return cid


class ReopeningRuntime(FakeRuntimeService):
    """ReopenContainerLog creates the log file afresh, as containerd does."""

    async def reopen_container_log(self, container_id: str) -> None:
        await super().reopen_container_log(container_id)
        path = self.containers[container_id].log_path
        with open(path, "ab"):
            pass


class Disk:
    """A filesystem whose used bytes are a base plus the images on it."""

    def __init__(self, capacity: int, base: int) -> None:
        self.capacity = capacity
        self.base = base


class DiskImages(FakeImageService):
    """Images keyed by ID (the GC removes by ID) on a model disk at /images."""

    def __init__(self, disk: Disk) -> None:
        super().__init__()
        self.disk = disk

    def add(self, iid: str, size: int, tags: tuple[str, ...] = (), pinned: bool = False) -> None:
        self.images[iid] = pb.Image(id=iid, repo_tags=list(tags), size=size, pinned=pinned)

    def used(self) -> int:
        return self.disk.base + sum(i.size for i in self.images.values())

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        self._call("image_fs_info")
        return pb.ImageFsInfoResponse(
            image_filesystems=[
                pb.FilesystemUsage(
                    fs_id=pb.FilesystemIdentifier(mountpoint="/images"),
                    used_bytes=pb.UInt64Value(value=self.used()),
                )
            ]
        )

    def usage(self, mountpoint: str):  # type: ignore[no-untyped-def]
        from kubelet.images.image_gc_manager import FsUsage

        assert mountpoint == "/images"
        return FsUsage(self.disk.capacity, self.disk.capacity - self.used())


def touch(path: str, size: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"x" * size)
