"""Pod cgroup layout and resources on fixture cgroup trees (v1 and v2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.cm.cgroup_manager import (
    CgroupError,
    CgroupManager,
    PodContainerManager,
    cgroup_mounts,
    pod_resources,
)
from kubelet.metrics import REGISTRY
from tests.unit.cm.helpers import mountinfo, pod


def test_mount_detection(tmp_path: Path) -> None:
    version, mounts = cgroup_mounts(mountinfo(tmp_path, v1=True))
    assert version == 1 and set(mounts) == {"cpu", "cpuacct", "cpuset", "memory", "pids"}
    v2 = tmp_path / "v2"
    v2.mkdir()
    assert cgroup_mounts(mountinfo(v2, v1=False)) == (2, {"": str(v2)})


def test_v1_pod_cgroups(tmp_path: Path) -> None:
    pcm = PodContainerManager(CgroupManager("", mountinfo(tmp_path, v1=True)))
    pcm.setup_qos()
    p = pod("u1", cpu="500m")
    assert pcm.name(p) == "kubepods/burstable/podu1"  # a request without limits
    assert pcm.name(pod("u0")) == "kubepods/besteffort/podu0"
    pcm.ensure(p)
    base = "kubepods/burstable/podu1"
    for ctrl in ("cpu", "memory", "pids", "cpuset"):
        assert (tmp_path / ctrl / base).is_dir()
    assert (tmp_path / "cpu" / base / "cpu.shares").read_text() == "512"
    # cpuset levels got CPUs and memory nodes from their parents
    assert (tmp_path / "cpuset" / base / "cpuset.cpus").read_text() == "0-1"
    assert (tmp_path / "cpuset" / "kubepods" / "cpuset.mems").read_text() == "0"
    (tmp_path / "memory" / base / "leftover-container").mkdir()  # what a runtime leaves
    assert pcm.orphans({"u1"}) == [] and pcm.orphans(set()) == [base]
    # a fixture tree holds files, so rmdir fails there; on cgroupfs it would not
    pcm.destroy(p)
    assert not (tmp_path / "memory" / base / "leftover-container").exists()


def test_v2_weight_and_limit(tmp_path: Path) -> None:
    mgr = CgroupManager("", mountinfo(tmp_path, v1=False))
    mgr.create("kubepods/podu2", {"cpu_shares": 1024, "memory_limit": 64 << 20})
    d = tmp_path / "kubepods" / "podu2"
    assert (d / "cpu.weight").read_text() == "39"
    assert (d / "memory.max").read_text() == str(64 << 20)
    assert (tmp_path / "kubepods" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"


def test_pod_resources() -> None:
    assert pod_resources(pod("a")) == {"cpu_shares": 2}
    assert pod_resources(pod("a", cpu="1", mem_limit="64Mi")) == {
        "cpu_shares": 1024,
        "memory_limit": 64 << 20,
    }


def limited(uid: str, cpu: str, mem: str, **spec: object) -> dict:
    res = {"limits": {"cpu": cpu, "memory": mem}}
    return {
        "metadata": {"uid": uid},
        "spec": {"containers": [{"name": "c", "resources": res}], **spec},
    }


def test_limits_give_a_cpu_quota_and_overhead_is_added(tmp_path: Path) -> None:
    """ResourceConfigForPod: a Guaranteed pod's cgroup gets the sum of its limits
    as CPU quota and memory limit, plus spec.overhead (also added to the
    shares); a limit that is not set anywhere gets no overhead."""
    plain = limited("g", "500m", "64Mi")
    assert pod_resources(plain) == {
        "cpu_shares": 512, "cpu_quota": 50000, "cpu_period": 100000, "memory_limit": 64 << 20,
    }  # fmt: skip
    heavy = limited("g", "500m", "64Mi", overhead={"cpu": "250m", "memory": "32Mi"})
    assert pod_resources(heavy) == {
        "cpu_shares": 768, "cpu_quota": 75000, "cpu_period": 100000, "memory_limit": 96 << 20,
    }  # fmt: skip
    # Burstable with requests only: overhead raises the shares, no limits appear.
    req = pod("b", cpu="100m")
    req["spec"]["overhead"] = {"cpu": "100m", "memory": "32Mi"}
    assert pod_resources(req) == {"cpu_shares": 204}
    # BestEffort: the minimum shares whatever the overhead.
    be = pod("e")
    be["spec"]["overhead"] = {"cpu": "1"}
    assert pod_resources(be) == {"cpu_shares": 2}
    # cpuCFSQuota off: no quota (max) but the period is still set.
    assert pod_resources(heavy, enforce_cpu_limits=False)["cpu_quota"] == -1
    for v1 in (True, False):
        d = tmp_path / f"v1-{v1}"
        d.mkdir()
        pcm = PodContainerManager(CgroupManager("", mountinfo(d, v1=v1)))
        pcm.setup_qos()
        pcm.ensure(heavy)
        if v1:
            assert (d / "cpu/kubepods/podg/cpu.cfs_quota_us").read_text() == "75000"
            assert (d / "cpu/kubepods/podg/cpu.cfs_period_us").read_text() == "100000"
            assert (d / "memory/kubepods/podg/memory.limit_in_bytes").read_text() == str(96 << 20)
        else:
            assert (d / "kubepods/podg/cpu.max").read_text() == "75000 100000"
            assert (d / "kubepods/podg/memory.max").read_text() == str(96 << 20)


def test_sidecars_and_init_containers_count_in_the_pod_cgroup() -> None:
    """PodRequests/PodLimits: sidecars add to the containers; an init container
    counts with the sidecars before it, and the pod gets the larger need (a
    sidecar over the pod's quota would be refused by the kernel on v1)."""
    p = limited("s", "200m", "64Mi")
    side = {"name": "side", "restartPolicy": "Always",
            "resources": {"limits": {"cpu": "300m", "memory": "32Mi"}}}  # fmt: skip
    big_init = {"name": "init", "resources": {"limits": {"cpu": "1", "memory": "16Mi"}}}
    p["spec"]["initContainers"] = [side, big_init]
    assert pod_resources(p) == {
        # cpu: max(200m + 300m, 300m + 1) ; memory: max(64Mi + 32Mi, 32Mi + 16Mi)
        "cpu_shares": 1331, "cpu_quota": 130000, "cpu_period": 100000, "memory_limit": 96 << 20,
    }  # fmt: skip
    # An init container without a cpu limit: no pod quota (not every one declares it).
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"memory": "16Mi"}}}]
    assert "cpu_quota" not in pod_resources(p)


def test_read_gives_back_what_update_wrote(tmp_path: Path) -> None:
    mgr = CgroupManager("", mountinfo(tmp_path, v1=True))
    mgr.create("kubepods/podr", {"cpu_shares": 307, "cpu_quota": 30000, "cpu_period": 100000,
                                 "memory_limit": 96 << 20})  # fmt: skip
    (tmp_path / "memory/kubepods/podr/memory.usage_in_bytes").write_text("4096\n")
    assert mgr.read("kubepods/podr") == {
        "cpu_shares": 307, "cpu_quota": 30000, "cpu_period": 100000,
        "memory_limit": 96 << 20, "memory_usage": 4096,
    }  # fmt: skip
    (tmp_path / "memory/kubepods/podr/memory.limit_in_bytes").write_text("9223372036854771712")
    assert mgr.read("kubepods/podr")["memory_limit"] == -1  # v1's "no limit"


def _cgroup_ops(op: str) -> float:
    name = "kubelet_cgroup_manager_duration_seconds_count"
    return REGISTRY.get_sample_value(name, {"operation_type": op}) or 0.0


def test_each_cgroup_operation_is_timed_failed_ones_too(tmp_path: Path) -> None:
    mgr = CgroupManager("", mountinfo(tmp_path, v1=False))
    before = {op: _cgroup_ops(op) for op in ("create", "update", "destroy")}
    mgr.create("kubepods/podu3", {"cpu_shares": 1024})
    mgr.update("kubepods/podu3", {"cpu_shares": 2048})
    with pytest.raises(CgroupError):  # no such cgroup: timed all the same, as upstream
        mgr.update("kubepods/podgone", {"cpu_shares": 2})
    mgr.destroy("kubepods/podu3")
    after = {op: _cgroup_ops(op) - before[op] for op in before}
    assert after == {"create": 1, "update": 2, "destroy": 1}
