"""DiskPressure picks its victim by local storage (emptyDir on disk, configMap,
downwardAPI), as upstream's rankDiskPressureFunc, not by memory."""

from __future__ import annotations

from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction.eviction_manager import EvictionManager, Observation

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

    m = EvictionManager(
        cfg,
        lambda: list(pods),
        evict,
        lambda: {"memory-hog": 4 * GiB},
        "/",
        observe_fn=lambda: {"nodefs.available": Observation(1 * GiB, 100 * GiB)},
        clock=lambda: 1000.0,
        volume_usage=lambda u: volumes.get(u, {}),
    )
    await m.synchronize()
    assert [n for n, _ in evicted] == ["disk-hog"]
    assert "ephemeral-storage" in evicted[0][1]
    assert m.under("DiskPressure")
    # Under disk pressure no new pod gets in, whatever its QoS, but a critical one.
    refused = m.admit(pod("new", [], storage_req="1Mi"))
    assert refused is not None and refused.reason == "Evicted"
    assert refused.message == "The node had condition: [DiskPressure]."
    assert m.admit(pod("new-plugin", [], priority=NODE_CRITICAL)) is None
