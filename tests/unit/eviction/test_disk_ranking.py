"""DiskPressure picks its victim by local storage (emptyDir on disk, configMap,
downwardAPI), as upstream's rankDiskPressureFunc, not by memory."""

from __future__ import annotations

from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction.eviction_manager import (
    EvictionManager,
    EvictionSources,
    Observation,
    volumes_only,
)
from kubelet.stats.ephemeral import Inodes, PodStorage

GiB = 2**30
MiB = 2**20


def pod(name: str, volumes: list[dict], storage_req: str | None = None, priority: int = 0) -> dict:
    res = {"requests": {"ephemeral-storage": storage_req}} if storage_req else {}
    return {
        "metadata": {"uid": name, "name": name, "namespace": "ns", "annotations": {}},
        "spec": {
            "priority": priority,
            "volumes": volumes,
            "containers": [{"name": "c", "resources": res}],
        },
    }


NODE_CRITICAL = 2_000_001_000  # system-node-critical


async def test_disk_pressure_evicts_the_pod_filling_the_disk() -> None:
    cfg = KubeletConfiguration()
    cfg.eviction_hard = {"nodefs.available": "10%"}
    pods = [
        pod("memory-hog", [{"name": "d", "emptyDir": {}}]),
        pod("disk-hog", [{"name": "d", "emptyDir": {}}]),
        pod("tmpfs-hog", [{"name": "m", "emptyDir": {"medium": "Memory"}}]),
        pod("within-request", [{"name": "d", "emptyDir": {}}], storage_req="1Gi"),
        # Uses the most, but a node plugin is critical: never a victim.
        pod("csi-plugin", [{"name": "d", "emptyDir": {}}], priority=NODE_CRITICAL),
    ]
    volumes = {
        "memory-hog": {"d": 1 * MiB},
        "disk-hog": {"d": 300 * MiB},
        "tmpfs-hog": {"m": 900 * MiB},  # in memory: not on the node's disk
        "within-request": {"d": 500 * MiB},
        "csi-plugin": {"d": 5 * GiB},
    }
    evicted: list[tuple[str, str]] = []

    async def evict(p: dict, grace: int, reason: str, message: str, **_: Any) -> None:
        evicted.append((p["metadata"]["name"], message))
        pods.remove(p)

    sources = EvictionSources(
        lambda: list(pods),
        lambda: {"nodefs.available": Observation(1 * GiB, 100 * GiB)},
        lambda: {"memory-hog": 4 * GiB},
        volumes_only(lambda u: volumes.get(u, {})),
    )
    m = EvictionManager(cfg, "/", sources, evict, clock=lambda: 1000.0)
    await m.synchronize()
    assert [n for n, _ in evicted] == ["disk-hog"]
    assert "ephemeral-storage" in evicted[0][1]
    assert m.under("DiskPressure")
    # Under disk pressure no new pod gets in, whatever its QoS, but a critical one.
    refused = m.admit(pod("new", [], storage_req="1Mi"))
    assert refused is not None and refused.reason == "Evicted"
    assert refused.message == "The node had condition: [DiskPressure]."
    assert m.admit(pod("new-plugin", [], priority=NODE_CRITICAL)) is None


INODE_USAGE = {
    "many-files": PodStorage({"d": 10 * MiB}, {"c": 0}, 10 * MiB, Inodes({"d": 90_000}, {"c": 5}, 90_005)),
    "big-file": PodStorage({"d": 900 * MiB}, {"c": 0}, 900 * MiB, Inodes({"d": 2}, {"c": 5}, 7)),
}  # fmt: skip


async def _evicted_under(signal: str, observed: Observation) -> list[str]:
    cfg = KubeletConfiguration()
    cfg.eviction_hard = {signal: "10%"}
    pods = [pod(n, [{"name": "d", "emptyDir": {}}]) for n in INODE_USAGE]
    evicted: list[str] = []

    async def evict(p: dict, grace: int, reason: str, message: str, **_: Any) -> None:
        evicted.append(p["metadata"]["name"])

    async def measure(ps: list[dict]) -> dict[str, PodStorage]:
        return {p["metadata"]["uid"]: INODE_USAGE[p["metadata"]["uid"]] for p in ps}

    sources = EvictionSources(lambda: list(pods), lambda: {signal: observed}, dict, measure)
    m = EvictionManager(cfg, "/", sources, evict, clock=lambda: 1000.0)
    await m.synchronize()
    return evicted


async def test_inode_pressure_ranks_by_inodes_not_bytes() -> None:
    """nodefs.inodesFree: the pod with the most inodes goes (no pod requests
    inodes, so any use is above its request), though another holds more bytes;
    nodefs.available on the same pods picks the one with more bytes."""
    inodes = await _evicted_under("nodefs.inodesFree", Observation(100, 1_000_000))
    assert inodes == ["many-files"]
    assert await _evicted_under("nodefs.available", Observation(GiB, 100 * GiB)) == ["big-file"]
