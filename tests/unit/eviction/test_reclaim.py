"""Disk thresholds by filesystem layout: containerfs thresholds derived as
upstream, node-level reclaim (dead containers, unused images) before any pod is
evicted, and the signals read again after it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction import signals as sig
from kubelet.eviction.eviction_manager import (
    EvictionManager,
    EvictionSources,
    Observation,
    Reclaimers,
    volumes_only,
)
from kubelet.eviction.signals import DiskLayout
from kubelet.eviction.thresholds import Threshold, reclaim_plan, thresholds, with_container_fs
from kubelet.stats.ephemeral import PodStorage

GiB = 2**30
SHARED = DiskLayout("/kubelet", "/kubelet", None, False, False)
DEDICATED = DiskLayout("/kubelet", "/images", None, True, False)
SPLIT = DiskLayout("/kubelet", "/images", "/kubelet", True, True)


def config(**kw: Any) -> KubeletConfiguration:
    c = KubeletConfiguration()
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def test_allocatable_memory_threshold_follows_the_hard_memory_one_when_pods_are_enforced() -> None:
    c = config(eviction_hard={"memory.available": "100Mi"},
               eviction_minimum_reclaim={"memory.available": "50Mi"})  # fmt: skip
    got = thresholds(c)
    assert Threshold(sig.ALLOCATABLE_MEMORY, "100Mi", True, 0.0, "50Mi") in got
    c.enforce_node_allocatable = []
    assert all(t.signal != sig.ALLOCATABLE_MEMORY for t in thresholds(c))


def test_containerfs_thresholds_follow_nodefs_or_imagefs_by_layout() -> None:
    hard = {"nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%",
            "imagefs.inodesFree": "4%", "containerfs.available": "1%"}  # fmt: skip
    c = config(
        eviction_hard=hard,
        eviction_soft={"imagefs.available": "20%"},
        eviction_soft_grace_period={"imagefs.available": "1m"},
    )
    base = thresholds(c)

    def containerfs(layout: DiskLayout) -> set[tuple[str, str, bool, float]]:
        return {(t.signal, t.value, t.hard, t.grace) for t in with_container_fs(base, layout)
                if t.signal.startswith("containerfs")}  # fmt: skip

    # One filesystem, or split (containers beside the kubelet): nodefs's; the
    # configured containerfs.available is replaced, as upstream.
    for layout in (SHARED, SPLIT):
        assert containerfs(layout) == {
            (sig.CONTAINERFS, "10%", True, 0.0),
            (sig.CONTAINERFS_INODES, "5%", True, 0.0),
        }
    # Containers with the images on their own filesystem: imagefs's, soft included.
    assert containerfs(DEDICATED) == {
        (sig.CONTAINERFS, "15%", True, 0.0),
        (sig.CONTAINERFS_INODES, "4%", True, 0.0),
        (sig.CONTAINERFS, "20%", False, 60.0),
    }


def test_reclaim_plan_by_layout() -> None:
    both = ("containers", "images")
    shared = reclaim_plan(SHARED)
    assert {shared[s] for s in shared} == {both}
    dedicated = reclaim_plan(DEDICATED)
    assert dedicated[sig.NODEFS] == () and dedicated[sig.NODEFS_INODES] == ()
    assert dedicated[sig.IMAGEFS] == both and dedicated[sig.CONTAINERFS] == both
    split = reclaim_plan(SPLIT)
    assert split[sig.IMAGEFS] == ("images",) and split[sig.IMAGEFS_INODES] == ("images",)
    assert split[sig.NODEFS] == ("containers",) and split[sig.CONTAINERFS] == ("containers",)


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": name, "name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "d", "emptyDir": {}}]},
    }


class Node:
    """An eviction manager on a node whose disks the reclaimers free."""

    def __init__(self, layout: DiskLayout | None, freed: dict[str, int], **cfg: Any) -> None:
        self.available = {"/kubelet": 1 * GiB, "/images": 1 * GiB}
        self.freed = freed  # reclaim step -> (filesystem, bytes) it frees
        self.ran: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.pods = [pod("a"), pod("b")]
        self.evicted: list[str] = []
        self.layout = layout

        async def evict(p: dict[str, Any], *_: Any, **__: Any) -> None:
            self.evicted.append(p["metadata"]["name"])
            self.pods.remove(p)

        async def layout_fn() -> DiskLayout | None:
            return self.layout

        sources = EvictionSources(
            lambda: list(self.pods), self.observe, dict,
            volumes_only(lambda u: {"d": GiB if u == "a" else 1}), layout=layout_fn,
        )  # fmt: skip
        self.m = EvictionManager(
            config(**cfg), "/kubelet", sources, evict, clock=lambda: 1000.0,
            node_event=lambda *e: self.events.append(e),
        )  # fmt: skip
        self.reclaim = Reclaimers(self._step("containers"), self._step("images"))

    def _fs(self, what: str) -> str:
        """The filesystem images, or containers' writable layers, are on."""
        layout = self.layout or SHARED
        assert layout.imagefs is not None
        return layout.imagefs if what == "images" else layout.containerfs or layout.imagefs

    def _step(self, name: str) -> Any:
        async def run() -> str | None:
            self.ran.append(name)
            self.available[self._fs(name)] += self.freed.get(name, 0)
            return None

        return run

    def observe(self) -> dict[str, Observation]:
        def on(path: str) -> Observation:
            return Observation(self.available[path], 100 * GiB)

        return {
            sig.NODEFS: on("/kubelet"),
            sig.IMAGEFS: on(self._fs("images")),
            sig.CONTAINERFS: on(self._fs("containers")),
        }


async def test_reclaim_that_frees_enough_evicts_no_pod() -> None:
    n = Node(SHARED, {"containers": 2 * GiB, "images": 10 * GiB},
             eviction_hard={"nodefs.available": "10%"})  # fmt: skip
    assert await n.m.synchronize(n.reclaim) is None
    assert n.ran == ["containers", "images"] and n.evicted == []
    assert n.m.under("DiskPressure")  # the condition this pass saw stays reported
    assert ("Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage") in (
        n.events
    )


async def test_reclaim_short_of_the_threshold_then_evicts_the_biggest_user() -> None:
    n = Node(SHARED, {"containers": 1 * GiB, "images": 1 * GiB},
             eviction_hard={"nodefs.available": "10%"})  # fmt: skip
    victim = await n.m.synchronize(n.reclaim)
    assert n.ran == ["containers", "images"]
    assert victim is not None and n.evicted == ["a"]


async def test_minimum_reclaim_counts_after_reclaim() -> None:
    # Freed to 11% available: above 10%, short of 10% + 5% minimum reclaim.
    n = Node(SHARED, {"images": 10 * GiB}, eviction_hard={"nodefs.available": "10%"},
             eviction_minimum_reclaim={"nodefs.available": "5%"})  # fmt: skip
    await n.m.synchronize(n.reclaim)
    assert n.evicted == ["a"]


async def test_dedicated_imagefs_nodefs_pressure_has_nothing_to_reclaim() -> None:
    n = Node(DEDICATED, {"containers": 50 * GiB, "images": 50 * GiB},
             eviction_hard={"nodefs.available": "10%"})  # fmt: skip
    await n.m.synchronize(n.reclaim)
    assert n.ran == [] and n.evicted == ["a"]


async def test_dedicated_imagefs_pressure_reclaims_containers_and_images() -> None:
    n = Node(DEDICATED, {"images": 50 * GiB}, eviction_hard={"imagefs.available": "10%"})
    n.available["/kubelet"] = 90 * GiB
    assert await n.m.synchronize(n.reclaim) is None
    assert n.ran == ["containers", "images"] and n.evicted == []


async def test_split_filesystems_reclaim_only_their_own() -> None:
    n = Node(SPLIT, {"images": 50 * GiB, "containers": 50 * GiB},
             eviction_hard={"imagefs.available": "10%"})  # fmt: skip
    n.available["/kubelet"] = 90 * GiB
    assert await n.m.synchronize(n.reclaim) is None
    assert n.ran == ["images"]
    # containerfs (the kubelet's filesystem here) holds nodefs's threshold.
    n = Node(SPLIT, {"images": 50 * GiB, "containers": 50 * GiB},
             eviction_hard={"nodefs.available": "10%"})  # fmt: skip
    n.available["/images"] = 90 * GiB
    assert await n.m.synchronize(n.reclaim) is None
    assert n.ran == ["containers"]


async def test_without_garbage_collectors_disk_pressure_evicts() -> None:
    n = Node(SHARED, {"images": 50 * GiB}, eviction_hard={"nodefs.available": "10%"})
    await n.m.synchronize(None)
    assert n.evicted == ["a"]


async def test_memory_pressure_never_runs_disk_reclaim() -> None:
    n = Node(SHARED, {"images": 50 * GiB}, eviction_hard={"memory.available": "1Gi"})
    n.m.sources = replace(n.m.sources, observe=lambda: {sig.MEMORY: Observation(10, 8 * GiB)})
    await n.m.synchronize(n.reclaim)
    assert n.ran == [] and n.evicted == ["a"]


async def test_layout_unknown_until_the_runtime_answers() -> None:
    n = Node(None, {"images": 50 * GiB}, eviction_hard={"imagefs.available": "10%"})
    n.available["/kubelet"] = 90 * GiB
    await n.m.synchronize(n.reclaim)
    assert n.m.layout is None and n.evicted == []  # one filesystem, not met
    n.layout = DEDICATED
    await n.m.synchronize(n.reclaim)
    assert n.m.layout is DEDICATED and n.ran == ["containers", "images"]


def storage(volume: int, container: int) -> PodStorage:
    return PodStorage({"d": volume}, {"c": container}, volume + container)


async def ranked(layout: DiskLayout, signal: str) -> list[str]:
    """The order pods go in when `signal` stays met with this layout."""
    n = Node(layout, {}, eviction_hard={signal: "10%"})
    usage = {"vol": storage(5 * GiB, 0), "layer": storage(0, 4 * GiB),
             "both": storage(3 * GiB, 3 * GiB)}  # fmt: skip
    n.pods = [pod(name) for name in usage]

    async def measure(pods: list[dict[str, Any]]) -> dict[str, PodStorage]:
        return {p["metadata"]["uid"]: usage[p["metadata"]["uid"]] for p in pods}

    n.m.sources = replace(n.m.sources, local_storage=measure)
    for _ in range(3):
        await n.m.synchronize(n.reclaim)
    return n.evicted


async def test_disk_ranking_on_one_filesystem_counts_everything_a_pod_stores() -> None:
    # A writable layer counts as much as a volume: "both" (6 GiB) goes first.
    assert await ranked(SHARED, sig.NODEFS) == ["both", "vol", "layer"]
    assert await ranked(SHARED, sig.IMAGEFS) == ["both", "vol", "layer"]


async def test_disk_ranking_with_a_dedicated_imagefs_counts_what_is_on_the_pressed_one() -> None:
    # nodefs holds the volumes; imagefs the containers' writable layers.
    assert await ranked(DEDICATED, sig.NODEFS) == ["vol", "both", "layer"]
    assert await ranked(DEDICATED, sig.IMAGEFS) == ["layer", "both", "vol"]
