"""Allocation and resize decisions (handlePodResourcesResize, canResizePod)."""

from __future__ import annotations

import copy
from pathlib import Path

from kubelet.allocation.allocation_manager import (
    CPU_STATIC_MESSAGE,
    POD_LEVEL_MESSAGE,
    QOS_CHANGE_MESSAGE,
    STATIC_POD_MESSAGE,
    SWAP_MESSAGE,
    AllocationManager,
    NodeLimits,
    completion_message,
    update_pod_from_allocation,
)
from kubelet.lifecycle.predicate import Admitter
from kubelet.status.resize_conditions import IN_PROGRESS, PENDING, ResizeConditions
from tests.unit.allocation.fixtures import GI, admit, manager, pod


def test_an_unchanged_pod_is_no_resize() -> None:
    m, a = manager()
    admit(m, a, pod("a"))
    assert not m.handle_resize(pod("a"))
    assert m.conditions.of("a") == []


def test_a_resize_that_fits_is_allocated_and_in_progress_at_its_generation() -> None:
    m, a = manager()
    admit(m, a, pod("a"))
    assert m.handle_resize(pod("a", cpu="500m", gen=2))
    assert m.allocated.get_container("a", "c") == {"requests": {"cpu": "500m", "memory": "64Mi"}}
    assert a.used.cpu_m == 500  # admission counts the new size from now on
    [c] = m.conditions.of("a")
    assert (c["type"], c["status"], c["observedGeneration"]) == (IN_PROGRESS, "True", 2)
    assert "reason" not in c


def test_more_than_the_node_has_is_infeasible_with_upstreams_message() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a"))
    assert not m.handle_resize(pod("a", cpu="1500m", gen=3))
    [c] = m.conditions.of("a")
    assert c["type"] == PENDING and c["reason"] == "Infeasible"
    assert c["message"] == "Node didn't have enough capacity: cpu, requested: 1500, capacity: 1000"
    assert c["observedGeneration"] == 3
    assert m.allocated.get_container("a", "c") == {"requests": {"cpu": "100m", "memory": "64Mi"}}
    assert m.pending == []  # never retried


def test_memory_is_named_first_when_both_do_not_fit() -> None:
    m, a = manager(cpu_m=1000, memory=GI)
    admit(m, a, pod("a"))
    m.handle_resize(pod("a", cpu="2", mem="2Gi"))
    assert m.conditions.of("a")[0]["message"] == (
        f"Node didn't have enough capacity: memory, requested: {2 * GI}, capacity: {GI}"
    )


def test_what_does_not_fit_beside_the_others_is_deferred_and_retried_when_they_leave() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a", cpu="400m"))
    admit(m, a, pod("b", cpu="500m"))
    want = pod("a", cpu="700m", gen=2)
    assert not m.handle_resize(want)
    [c] = m.conditions.of("a")
    assert (c["reason"], c["message"]) == (
        "Deferred",
        "Node didn't have enough resource: cpu, requested: 700, used: 500, capacity: 1000",
    )
    assert m.pending == ["a"]
    # Retried while b still runs: nothing changes, nothing to sync.
    assert m.retry_pending({"a": want}.get, "pods_removed") == []
    assert m.pending == ["a"]
    a.release("b")
    assert m.retry_pending({"a": want}.get, "pods_removed") == ["a"]
    assert m.pending == []
    assert [c["type"] for c in m.conditions.of("a")] == [IN_PROGRESS]


def test_a_reverted_resize_clears_the_pending_condition() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a"))
    m.handle_resize(pod("a", cpu="5"))
    assert m.conditions.of("a")
    assert not m.handle_resize(pod("a"))
    assert m.conditions.of("a") == []


def test_static_pods_and_swapping_containers_are_infeasible() -> None:
    m, a = manager()
    static = pod("s")
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    admit(m, a, static)
    m.handle_resize(pod("s", cpu="200m") | {"metadata": static["metadata"]})
    assert m.conditions.of("s")[0]["message"] == STATIC_POD_MESSAGE
    swapping, _ = manager()
    swapping.swaps = lambda _p, _c: True
    admit(swapping, a, pod("w"))
    swapping.handle_resize(pod("w", mem="128Mi"))
    assert swapping.conditions.of("w")[0]["message"] == SWAP_MESSAGE
    # A cpu-only change of a swapping container is fine.
    assert swapping.handle_resize(pod("w", cpu="300m"))


def test_guaranteed_pods_cannot_change_cpu_under_the_static_cpu_manager() -> None:
    m, a = manager(cpu_manager_static=True)
    admit(m, a, pod("g", cpu="1", limits=True))
    m.handle_resize(pod("g", cpu="2", limits=True))
    assert m.conditions.of("g")[0]["message"] == CPU_STATIC_MESSAGE
    # A burstable pod is not concerned.
    admit(m, a, pod("b"))
    assert m.handle_resize(pod("b", cpu="300m"))


def test_deferred_resizes_that_shrink_are_retried_first_then_by_priority() -> None:
    m, a = manager(cpu_m=1000)
    for u in ("grow", "prio", "shrink"):
        admit(m, a, pod(u, cpu="300m"))
    pods = {
        "grow": pod("grow", cpu="600m"),
        "prio": pod("prio", cpu="600m", priority=100),
        "shrink": pod("shrink", cpu="200m"),
    }
    m.pending = ["grow", "prio", "shrink"]
    order = sorted(m.pending, key=lambda u: m._retry_order(pods[u]))
    assert order == ["shrink", "prio", "grow"]


def test_the_pod_runs_with_its_allocation_not_its_wish() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a"))
    wish = pod("a", cpu="5")
    m.handle_resize(wish)
    got = m.allocated_pod(wish)
    assert got["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    assert wish["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "5"  # not touched
    _same, changed = update_pod_from_allocation(pod("a"), m.allocated.get_pod("a"))
    assert not changed


def test_in_progress_until_every_running_container_is_at_its_allocation() -> None:
    m, a = manager()
    p = pod("a")
    admit(m, a, p)
    m.set_actuated(p, p["spec"]["containers"][0])
    assert m.handle_resize(pod("a", cpu="300m", gen=2))
    allocated = m.allocated_pod(pod("a", cpu="300m", gen=2))
    assert m.check_in_progress(allocated, {"c"}) is None
    assert [c["type"] for c in m.conditions.of("a")] == [IN_PROGRESS]
    # A container that does not run is sized when it starts: not waited for.
    assert m.in_progress(allocated, set()) is False
    m.set_actuated(allocated, allocated["spec"]["containers"][0])
    done = m.check_in_progress(allocated, {"c"})
    assert done == completion_message(allocated)
    assert done.startswith('Pod resize completed: {"containers":[{"name":"c","resources":')
    assert m.conditions.of("a") == []


def test_sidecars_are_allocated_init_containers_are_not() -> None:
    m, a = manager()
    p = pod("a")
    p["spec"]["initContainers"] = [
        {"name": "init", "image": "i", "resources": {"requests": {"cpu": "1"}}},
        {
            "name": "side",
            "image": "i",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "50m"}},
        },
    ]
    admit(m, a, p)
    assert set(m.allocated.get_pod("a") or {}) == {"c", "side"}


def test_the_allocation_survives_a_restart(tmp_path: Path) -> None:
    m, a = manager(tmp=tmp_path)
    admit(m, a, pod("a"))
    m.handle_resize(pod("a", cpu="200m"))
    again, _ = manager(tmp=tmp_path)
    got = again.allocated_pod(pod("a", cpu="900m"))
    assert got["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"


def test_off_nothing_is_allocated_and_a_changed_spec_is_not_looked_at() -> None:
    admitter = Admitter(110, 1000, GI)
    m = AllocationManager(
        NodeLimits(1000, GI), admitter, ResizeConditions(lambda: "t"), enabled=False
    )
    m.set_allocated(pod("a"))
    assert m.allocated.pods() == set()
    assert not m.handle_resize(pod("a", cpu="300m"))
    assert m.conditions.of("a") == []
    assert copy.deepcopy(pod("a")) == m.allocated_pod(pod("a"))


def test_what_the_api_server_refuses_is_refused_here_too() -> None:
    m, a = manager()
    admit(m, a, pod("q"))
    m.handle_resize(pod("q", limits=True))  # Burstable -> Guaranteed
    assert m.conditions.of("q")[0]["message"] == QOS_CHANGE_MESSAGE
    admit(m, a, pod("l", resources={"requests": {"cpu": "1"}}))
    m.handle_resize(pod("l", cpu="200m", resources={"requests": {"cpu": "1"}}))
    assert m.conditions.of("l")[0]["message"] == POD_LEVEL_MESSAGE
    assert m.conditions.of("l")[0]["reason"] == "Infeasible"
