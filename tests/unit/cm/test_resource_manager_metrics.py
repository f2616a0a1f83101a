"""The CPU, memory and topology managers' metrics, read from the kubelet's
registry as /metrics serves it, moving as pods are admitted and removed.
The registry is the process's: counters are compared before and after."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kubelet.cm.cpumanager.policy_static import SMTAlignmentError
from kubelet.cm.memorymanager.policy_static import MemoryAllocationError
from kubelet.metrics import REGISTRY
from kubelet.types import Pod
from tests.unit.cm.fixtures import (
    GiB,
    Pods,
    cm,
    cpu_gpu_pod,
    gpod,
    mem_pod,
    numa_managers,
    serving_devices,
    static,
)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def delta(names: list[tuple[str, dict[str, str]]]) -> Callable[[], list[float]]:
    """How much each (metric, labels) moved since delta() was called."""
    before = [value(n, **lb) for n, lb in names]
    return lambda: [value(n, **lb) - b for (n, lb), b in zip(names, before, strict=True)]


PIN = [
    ("kubelet_cpu_manager_pinning_requests_total", {}),
    ("kubelet_cpu_manager_pinning_errors_total", {}),
]
POOL = "kubelet_cpu_manager_shared_pool_size_millicores"
EXCLUSIVE = "kubelet_cpu_manager_exclusive_cpu_allocation_count"
PER_NUMA = "kubelet_cpu_manager_allocation_per_numa"
ALIGNED = "kubelet_container_aligned_compute_resources_count"
UNALIGNED = "kubelet_container_aligned_compute_resources_failure_count"


def test_cpu_manager_pool_and_exclusive_cpus_follow_admission_and_removal(tmp_path: Path) -> None:
    one = gpod("one", [{"name": "c", "cpu": "2"}])
    shared = gpod("shared", [{"name": "c", "cpu": "500m"}])
    pods = Pods(one, shared)
    # DualSocketHT: 12 CPUs, even ones on NUMA 0, odd ones on NUMA 1; 1 reserved.
    mgr = cm(tmp_path, pods)
    assert (value(POOL), value(EXCLUSIVE)) == (11000, 0)
    assert value(PER_NUMA, numa_node="0") == value(PER_NUMA, numa_node="1") == 0
    moved = delta(PIN)
    mgr.allocate(shared, shared["spec"]["containers"][0])  # shared pool: not pinned
    assert moved() == [0, 0]
    mgr.allocate(one, one["spec"]["containers"][0])
    assert moved() == [1, 0]
    got = mgr.exclusive_cpus("one", "c")
    assert len(got) == 2 and (value(POOL), value(EXCLUSIVE)) == (9000, 2)
    on_node0 = sum(1 for c in got if c % 2 == 0)
    assert value(PER_NUMA, numa_node="0") == on_node0
    assert value(PER_NUMA, numa_node="1") == 2 - on_node0
    mgr.allocate(one, one["spec"]["containers"][0])  # re-admitted: counted, nothing new
    assert moved() == [2, 0] and value(EXCLUSIVE) == 2
    del pods.pods["one"]  # it is gone: its CPUs go back to the pool
    mgr.remove_stale_state()
    assert (value(POOL), value(EXCLUSIVE)) == (11000, 0)
    assert value(PER_NUMA, numa_node="0") == value(PER_NUMA, numa_node="1") == 0


def test_cpu_manager_errors_and_physical_cpu_alignment(tmp_path: Path) -> None:
    mgr = cm(tmp_path, **{"full-pcpus-only": "true"})
    physical = [
        (ALIGNED, {"scope": "container", "boundary": "physical_cpu"}),
        (UNALIGNED, {"scope": "container", "boundary": "physical_cpu"}),
    ]
    moved = delta(PIN + physical)
    odd = gpod("odd", [{"name": "c", "cpu": "3"}])
    with pytest.raises(SMTAlignmentError):
        mgr.allocate(odd, odd["spec"]["containers"][0])
    assert moved() == [1, 1, 0, 1]
    even = gpod("even", [{"name": "c", "cpu": "4"}])
    mgr.allocate(even, even["spec"]["containers"][0])
    assert moved() == [2, 1, 1, 1]
    # Served under upstream's name, without a _total suffix.
    text = generate_latest(REGISTRY).decode()
    assert f"# TYPE {ALIGNED} untyped" in text
    assert f'\n{ALIGNED}{{boundary="physical_cpu",scope="container"}} ' in text


def test_memory_manager_counts_guaranteed_pins_and_failures() -> None:
    p, s = static()
    moved = delta([
        ("kubelet_memory_manager_pinning_requests_total", {}),
        ("kubelet_memory_manager_pinning_errors_total", {}),
    ])  # fmt: skip
    ok = mem_pod("ok", ("c", "1Gi", False))
    p.allocate(s, ok, ok["spec"]["containers"][0])
    assert moved() == [1, 0]
    burstable: Pod = {"metadata": {"uid": "b"}, "spec": {"containers": [{"name": "c"}]}}
    p.allocate(s, burstable, burstable["spec"]["containers"][0])
    assert moved() == [1, 0]
    huge = mem_pod("huge", ("c", f"{64 * GiB}", False))
    with pytest.raises(MemoryAllocationError):
        p.allocate(s, huge, huge["spec"]["containers"][0])
    assert moved() == [2, 1]


# ------------------------------------------------------ the topology manager

TOPO = [
    ("kubelet_topology_manager_admission_requests_total", {}),
    ("kubelet_topology_manager_admission_errors_total", {}),
    ("kubelet_topology_manager_admission_duration_ms_count", {}),
]


def numa_labels(scope: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (ALIGNED, {"scope": scope, "boundary": "numa_node"}),
        (UNALIGNED, {"scope": scope, "boundary": "numa_node"}),
    ]


@pytest.mark.parametrize("scope", ["container", "pod"])
async def test_topology_manager_admissions_errors_and_alignment(short_root, scope) -> None:
    first, second = cpu_gpu_pod("p"), cpu_gpu_pod("q")
    rm = numa_managers(short_root, "single-numa-node", scope, Pods(first))
    async with serving_devices(rm, {"g0": [0], "g1": [1]}):
        moved = delta(TOPO + numa_labels(scope))
        assert rm.admit(first) is None  # g0 and a CPU of NUMA 0
        assert moved() == [1, 0, 1, 1, 0]
        # g1 is on NUMA 1, where no CPU is left for pods: not aligned, refused.
        refused = rm.admit(second)
        assert refused is not None and refused.reason == "TopologyAffinityError"
        assert moved() == [2, 1, 2, 1, 1]


async def test_topology_manager_without_alignment_counts_requests_only(short_root) -> None:
    pod = gpod("p", [{"name": "c", "cpu": "1"}])
    rm = numa_managers(short_root, "best-effort", "container", Pods(pod))
    moved = delta(TOPO + numa_labels("container") + numa_labels("pod"))
    assert rm.admit(pod) is None
    assert moved() == [1, 0, 1, 0, 0, 0, 0]
    too_big = gpod("big", [{"name": "c", "cpu": "3"}])  # 1 CPU is left
    refused = rm.admit(too_big)
    assert refused is not None and refused.reason == "UnexpectedAdmissionError"
    assert moved() == [2, 1, 2, 0, 0, 0, 0]
    for labels in numa_labels("container") + numa_labels("pod"):
        assert REGISTRY.get_sample_value(*labels) is not None  # created at start, as upstream


def test_shared_pool_starts_from_the_state_file(tmp_path: Path) -> None:
    """A restarted kubelet reports the exclusive CPUs its state file holds."""
    pod = gpod("one", [{"name": "c", "cpu": "2"}])
    pods = Pods(pod)
    cm(tmp_path, pods).allocate(pod, pod["spec"]["containers"][0])
    cm(tmp_path / "other", Pods())  # another manager meanwhile: the gauges at 0
    assert value(EXCLUSIVE) == 0
    again = cm(tmp_path, pods)
    assert again.exclusive_cpus("one", "c") and (value(POOL), value(EXCLUSIVE)) == (9000, 2)
