"""The pod startup tracker and the /metrics pod counts are wired through the
builders: one tracker hears the status manager and the image pulls, and the
counts read the pod manager and the active pods."""

from __future__ import annotations

from pathlib import Path

from kubelet.cmd.kubelet import build_server
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kubelet import Kubelet
from kubelet.kubelet_subsystems import NodeSetup
from kubelet.types import CONFIG_SOURCE, FILE_SOURCE, Pod
from tests.unit.cm.topologies import two_numa_nodes


def _kubelet(tmp_path: Path) -> Kubelet:
    s, _, _ = build_server(["--cgroups-per-qos=false", "--enforce-node-allocatable="])
    assert s is not None
    return Kubelet(
        s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService(),
        node_setup=NodeSetup(machine_topology=two_numa_nodes()),
    )  # fmt: skip


def _pod(u: str, static: bool) -> Pod:
    ann = {CONFIG_SOURCE: FILE_SOURCE} if static else {}
    meta = {"name": u, "namespace": "default", "uid": u, "annotations": ann}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}}  # type: ignore[typeddict-item]


def test_one_tracker_hears_statuses_and_pulls(tmp_path: Path) -> None:
    k = _kubelet(tmp_path)
    tracker = k.pods.startup
    assert k.status_manager.on_status_set == tracker.record_status_updated
    assert k.runtime_manager.image_manager.startup is tracker


def test_pod_counts_split_static_and_follow_the_pod_manager(tmp_path: Path) -> None:
    k = _kubelet(tmp_path)
    assert k.pod_counts() == k.pod_counts().__class__()
    k.pod_manager.add_or_update(_pod("a", static=False))
    k.pod_manager.add_or_update(_pod("b", static=True))
    k.pod_manager.add_or_update(_pod("c", static=False))
    c = k.pod_counts()
    assert (c.desired, c.desired_static, c.mirrors) == (2, 1, 0)
    # Active: admitted and not finished; a rejected pod is not counted.
    assert (c.active, c.active_static) == (2, 1)
    k.pods.rejected.add("c")
    c = k.pod_counts()
    assert (c.active, c.active_static) == (1, 1)


def test_the_pod_manager_generation_moves_on_add_and_remove_only(tmp_path: Path) -> None:
    k = _kubelet(tmp_path)
    g = k.pod_manager.generation
    p = _pod("a", static=False)
    k.pod_manager.add_or_update(p)
    k.pod_manager.add_or_update(p)
    assert k.pod_manager.generation == g + 1
    k.pod_manager.remove(p)
    assert k.pod_manager.generation == g + 2


async def test_housekeeping_sets_the_orphaned_pod_gauges_removal_failures_too(
    tmp_path: Path,
) -> None:
    """Pod dirs of pods nothing knows: counted by each sweep; a dir whose removal
    fails (a mount left inside stops it) counts as an error."""
    import os

    from kubelet.metrics import REGISTRY
    from kubelet.util import mountutil

    k = _kubelet(tmp_path)
    (tmp_path / "pods" / "gone").mkdir(parents=True)
    stuck = tmp_path / "pods" / "stuck" / "plugins" / "leak"
    stuck.mkdir(parents=True)
    mountutil.mount("tmpfs", str(stuck), "tmpfs", "size=65536")
    try:
        await k.housekeeping()
        assert REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes") == 2
        assert REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes_errors") == 1
        assert not (tmp_path / "pods" / "gone").exists() and stuck.exists()
    finally:
        mountutil.umount(str(stuck))
    await k.housekeeping()
    assert not os.path.exists(tmp_path / "pods" / "stuck")
    assert REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes") == 1
    assert REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes_errors") == 0
