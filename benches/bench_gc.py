"""Garbage collection passes at 5,000 pods and 500 images on the CRI fake.

A steady node: every pod has a ready sandbox, a running container and the dead
instance before it (kept: one per container), a pod log dir; 500 images, 50 of
them in use, the image fs below the high threshold. So a pass removes nothing
and costs what it costs every minute (containers) or five (images).

The fake builds fresh protobuf objects on every List call, which a real client
pays as decoding instead; two variants: ``gc`` hands the pass prebuilt lists
(our code alone), ``decode`` decodes the serialized responses first, as the
grpc client does.

    python -m pytest benches/bench_gc.py -o python_files='bench_*.py'
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.images.image_gc_manager import FsUsage, ImageGCManager, ImageGCPolicy
from kubelet.kuberuntime.kuberuntime_gc import ContainerGC
from kubelet.kuberuntime.labels import CONTAINER_NAME, POD_UID

PODS = 5000
IMAGES = 500
IN_USE = 50
NOW = 2_000_000_000.0


class ListedRuntime(FakeRuntimeService):
    """List calls answer from prebuilt lists, or decode them from bytes."""

    def __init__(self, decode: bool) -> None:
        super().__init__()
        self.decode = decode
        self.c_raw = b""
        self.s_raw = b""
        self.c_list: list[pb.Container] = []
        self.s_list: list[pb.PodSandbox] = []

    def freeze(self) -> None:
        self.c_list = self._container_items(None)
        self.s_list = self._sandbox_items(None)
        self.c_raw = pb.ListContainersResponse(containers=self.c_list).SerializeToString()
        self.s_raw = pb.ListPodSandboxResponse(items=self.s_list).SerializeToString()

    async def list_containers(self, filter: pb.ContainerFilter | None = None) -> list[pb.Container]:
        if self.decode:
            return list(pb.ListContainersResponse.FromString(self.c_raw).containers)
        return self.c_list

    async def list_pod_sandbox(
        self, filter: pb.PodSandboxFilter | None = None
    ) -> list[pb.PodSandbox]:
        if self.decode:
            return list(pb.ListPodSandboxResponse.FromString(self.s_raw).items)
        return self.s_list


class ListedImages(FakeImageService):
    def __init__(self, decode: bool) -> None:
        super().__init__()
        self.decode = decode
        self.raw = b""
        self.items: list[pb.Image] = []

    def freeze(self) -> None:
        self.items = list(self.images.values())
        self.raw = pb.ListImagesResponse(images=self.items).SerializeToString()

    async def list_images(self, filter: pb.ImageFilter | None = None) -> list[pb.Image]:
        if self.decode:
            return list(pb.ListImagesResponse.FromString(self.raw).images)
        return self.items

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return pb.ImageFsInfoResponse(
            image_filesystems=[pb.FilesystemUsage(fs_id=pb.FilesystemIdentifier(mountpoint="/i"))]
        )


async def populate(rt: FakeRuntimeService) -> None:
    for i in range(PODS):
        uid = f"{i:08d}-0000-4000-8000-000000000000"
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=f"pod-{i}", uid=uid, namespace="default"),
            labels={POD_UID: uid},
        )
        sid = await rt.run_pod_sandbox(cfg)
        rt.sandboxes[sid].created_at = int((NOW - 3600) * 1e9)
        for n, state in enumerate((pb.CONTAINER_EXITED, pb.CONTAINER_RUNNING)):
            cc = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="app", attempt=n),
                image=pb.ImageSpec(image=f"sha256:{i % IN_USE:064x}"),
                labels={POD_UID: uid, CONTAINER_NAME: "app"},
            )
            cid = await rt.create_container(sid, cc, cfg)
            rt.containers[cid].state = state  # type: ignore[assignment]
            rt.containers[cid].created_at = int((NOW - 3000 + n) * 1e9)
            rt.containers[cid].image_ref = f"sha256:{i % IN_USE:064x}"


@pytest.fixture(scope="module")
def log_dirs() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        for i in range(PODS):
            os.mkdir(os.path.join(d, f"default_pod-{i}_{i:08d}-0000-4000-8000-000000000000"))
        # A steady node: no pod came or went for a while, so the listing is reused
        # (each pod still gets its existence checked).
        os.utime(d, (time.time() - 600, time.time() - 600))
        yield d


@pytest.mark.parametrize("variant", ["gc", "decode"])
def test_container_gc_pass(benchmark, log_dirs: str, variant: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"gc_container_pass_{PODS}"
    benchmark.extra_info["impl"] = variant
    loop = asyncio.new_event_loop()
    rt = ListedRuntime(decode=variant == "decode")
    loop.run_until_complete(populate(rt))
    rt.freeze()
    pods = {s.metadata.uid for s in rt.sandboxes.values()}
    gc = ContainerGC(rt, pods.__contains__, log_dirs, clock=lambda: NOW)

    def one() -> None:
        res = loop.run_until_complete(gc.garbage_collect())
        assert not (res.containers or res.sandboxes or res.log_dirs)

    benchmark(one)
    loop.close()


@pytest.mark.parametrize("variant", ["gc", "decode"])
def test_image_gc_pass(benchmark, variant: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"gc_image_pass_{PODS}"
    benchmark.extra_info["impl"] = variant
    loop = asyncio.new_event_loop()
    rt = ListedRuntime(decode=variant == "decode")
    loop.run_until_complete(populate(rt))
    rt.freeze()
    images = ListedImages(decode=variant == "decode")
    for i in range(IMAGES):
        iid = f"sha256:{i:064x}"
        images.images[iid] = pb.Image(
            id=iid,
            repo_tags=[f"registry.example/app-{i}:v1"],
            repo_digests=[f"registry.example/app-{i}@sha256:{i + 7:064x}"],
            size=50 << 20,
        )
    images.freeze()
    gc = ImageGCManager(
        images,
        rt,
        ImageGCPolicy(),
        sandbox_image="registry.k8s.io/pause:3.10",
        fs_usage=lambda _: FsUsage(100 << 30, 50 << 30),
        clock=lambda: NOW,
    )

    def one() -> None:
        res = loop.run_until_complete(gc.garbage_collect())
        assert not res.removed

    benchmark(one)
    loop.close()
