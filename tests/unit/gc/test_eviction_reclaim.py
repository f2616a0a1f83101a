"""The garbage collectors' eviction entry points (GarbageCollectors.reclaimers):
DeleteAllUnusedContainers takes the dead containers of pods whose workers have
stopped, which the periodic pass keeps; DeleteUnusedImages every unused image;
a failure is handed back as words, not raised."""

from __future__ import annotations

from pathlib import Path

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService
from kubelet.images.image_gc_manager import ImageGCManager, ImageGCPolicy
from kubelet.kubelet_node_subsystems import GarbageCollectors
from kubelet.kuberuntime.kuberuntime_gc import ContainerGC
from kubelet.logs.container_log_manager import ContainerLogManager

from .fakes import Clock, Disk, DiskImages, add_container, add_sandbox

MiB = 1 << 20
NOW = 1_000_000.0


async def test_reclaimers_free_terminated_pods_containers_and_unused_images(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    # "done": still in the API (its content is needed) but every container stopped.
    done = await add_sandbox(rt, "done", NOW - 1000, ready=False)
    dead = await add_container(rt, done, "app", NOW - 900)
    live = await add_sandbox(rt, "live", NOW - 1000)
    running = await add_container(rt, live, "app", NOW - 900, state=pb.CONTAINER_RUNNING,
                                  image="sha256:used")  # fmt: skip
    containers = ContainerGC(rt, lambda _uid: True, str(tmp_path / "pods"),
                             pod_terminated=lambda uid: uid == "done", clock=Clock(NOW))  # fmt: skip
    images = DiskImages(Disk(1000 * MiB, 300 * MiB))
    for name in ("used", "old"):
        images.add(f"sha256:{name}", 100 * MiB, (f"docker.io/library/{name}:1",))
    image_gc = ImageGCManager(
        images, rt, ImageGCPolicy(min_age=0.0), fs_usage=images.usage, clock=Clock(0.0)
    )
    gc = GarbageCollectors(containers, image_gc, ContainerLogManager(rt))
    # The periodic pass keeps the dead container of a pod that still exists.
    assert (await containers.garbage_collect()).containers == []
    r = gc.reclaimers()
    assert await r.containers() is None
    assert set(rt.containers) == {running} and dead not in rt.containers
    assert await r.images() is None
    assert set(images.images) == {"sha256:used"}
    # A runtime that fails is reported back to the eviction manager.
    rt.inject_error("list_containers", errors.CRIError("ListContainers", "down"))
    problem = await r.containers()
    assert problem is not None and "down" in problem
