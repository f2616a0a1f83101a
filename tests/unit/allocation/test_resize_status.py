"""The resize conditions' transitions and what the pod status shows of a resize."""

from __future__ import annotations

import itertools

from kubelet import metrics
from kubelet.container.runtime import (
    EXITED,
    RUNNING,
    ContainerResources,
    ContainerStatus,
    PodStatus,
)
from kubelet.status import resize_status
from kubelet.status.resize_conditions import IN_PROGRESS, PENDING, ResizeConditions
from kubelet.status.status_manager import status_patch


def conds() -> ResizeConditions:
    ticks = itertools.count(1)
    return ResizeConditions(lambda: f"t{next(ticks)}")


def test_pending_moves_its_transition_time_only_with_a_new_reason() -> None:
    c = conds()
    c.set_pending("u", "Deferred", "no room", 2)
    first = c.get("u", PENDING)
    assert first == {
        "type": PENDING, "status": "True", "lastProbeTime": "t1", "lastTransitionTime": "t1",
        "observedGeneration": 2, "reason": "Deferred", "message": "no room",
    }  # fmt: skip
    c.set_pending("u", "Deferred", "no room, other numbers", 2)
    assert c.get("u", PENDING)["lastTransitionTime"] == "t1"  # type: ignore[index]
    c.set_pending("u", "Infeasible", "too big", 3)
    assert c.get("u", PENDING)["lastTransitionTime"] == "t3"  # type: ignore[index]
    c.clear_pending("u")
    assert c.of("u") == []


def in_progress_gauge() -> float:
    return metrics.REGISTRY.get_sample_value("kubelet_pod_in_progress_resizes") or 0.0


def test_in_progress_keeps_its_generation_and_error_until_cleared() -> None:
    c = conds()
    c.set_in_progress("u", "", "", 2)
    assert in_progress_gauge() == 1  # kubelet_pod_in_progress_resizes
    c.set_in_progress("u", "Error", "boom", 5)
    got = c.get("u", IN_PROGRESS)
    assert got is not None
    assert (got["observedGeneration"], got["reason"], got["message"]) == (2, "Error", "boom")
    c.set_in_progress("u", "", "", 7)  # the check in each sync keeps the error
    assert c.get("u", IN_PROGRESS)["reason"] == "Error"  # type: ignore[index]
    assert in_progress_gauge() == 1
    assert c.clear_in_progress("u") and not c.clear_in_progress("u")
    assert in_progress_gauge() == 0


def test_conditions_are_listed_pending_first_and_backfilled_after_a_restart() -> None:
    c = conds()
    c.backfill("u", [
        {"type": "Ready", "status": "True"},
        {"type": IN_PROGRESS, "status": "True", "observedGeneration": 4},
        {"type": PENDING, "status": "True", "reason": "Deferred", "message": "m", "observedGeneration": 5},
    ])  # fmt: skip
    assert [x["type"] for x in c.of("u")] == [PENDING, IN_PROGRESS]
    assert c.is_reason("u", "Deferred")


def test_the_status_shows_the_allocation_and_what_the_runtime_runs() -> None:
    alloc = {
        "c": {
            "requests": {"cpu": "150m", "memory": "48Mi"},
            "limits": {"cpu": "300m", "memory": "96Mi"},
        },
        "side": {"requests": {"cpu": "50m"}},
    }
    runtime = PodStatus("u", "p", "default", [], [], [
        ContainerStatus("1", "c", RUNNING, resources=ContainerResources(200, 103, 64 * 1024 * 1024)),
        ContainerStatus("2", "side", EXITED, resources=ContainerResources(0, 2, 0)),
    ], 0)  # fmt: skip
    api = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c"}],
        "initContainerStatuses": [{"name": "side"}, {"name": "init"}],
    }
    cond = {"type": IN_PROGRESS, "status": "True"}
    resize_status.apply(api, alloc, runtime, [cond])  # type: ignore[arg-type]
    assert api["containerStatuses"] == [{
        "name": "c",
        # The runtime's cpu limit, memory limit and cpu request; the memory
        # request is the allocation's.
        "resources": {"limits": {"cpu": "200m", "memory": "64Mi"},
                      "requests": {"cpu": "103m", "memory": "48Mi"}},
        "allocatedResources": {"cpu": "150m", "memory": "48Mi"},
    }]  # fmt: skip
    side, init = api["initContainerStatuses"]
    assert side["resources"] == {"requests": {"cpu": "50m"}}  # not running: the allocation
    assert "resources" not in init and "allocatedResources" not in init
    assert [c["type"] for c in api["conditions"]] == ["Ready", IN_PROGRESS]


def test_tiny_cpu_values_show_as_allocated_and_the_memory_request_as_actuated() -> None:
    alloc = {"c": {"requests": {"cpu": "1m", "memory": "64Mi"}, "limits": {"cpu": "5m"}}}
    runtime = PodStatus("u", "p", "default", [], [], [
        # shares 2 read back as 2m, the 1000µs quota floor as 10m
        ContainerStatus("1", "c", RUNNING, resources=ContainerResources(10, 2, 0)),
    ], 0)  # fmt: skip
    api = {"containerStatuses": [{"name": "c"}]}
    actuated = {"c": {"requests": {"cpu": "1m", "memory": "32Mi"}}}
    resize_status.apply(api, alloc, runtime, [], actuated)  # type: ignore[arg-type]
    assert api["containerStatuses"][0]["resources"] == {
        "limits": {"cpu": "5m"},
        "requests": {"cpu": "1m", "memory": "32Mi"},
    }


def test_a_resize_condition_that_ended_is_deleted_from_the_api_status() -> None:
    """A merge by type keeps a condition the patch leaves out: one that ended
    must be deleted by name, others owned by others are left alone."""
    api = {"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": IN_PROGRESS, "status": "True", "reason": "Error", "observedGeneration": 3},
        {"type": "example.com/gate", "status": "True"},
    ]}  # fmt: skip
    ours = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert status_patch(api, ours) == {"conditions": [{"$patch": "delete", "type": IN_PROGRESS}]}
