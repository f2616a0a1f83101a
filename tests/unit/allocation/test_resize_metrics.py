"""The in-place resize families of /metrics move where upstream's do:
kubelet_container_requested_resizes_total (a changed spec),
kubelet_pod_infeasible_resizes_total and kubelet_pod_deferred_accepted_resizes_total
(the allocation manager's verdicts), kubelet_pod_pending_resizes (the
PodResizePending conditions held). The duration histogram is in
tests/unit/kuberuntime/test_pod_resize.py, next to the resize it times."""

from __future__ import annotations

import copy
from typing import Any

from kubelet import metrics
from kubelet.allocation.allocation_manager import requested_resizes, resize_operation
from kubelet.types import Pod
from tests.unit.allocation.fixtures import admit, manager, pod


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def requested(resource: str, requirement: str, op: str) -> float:
    return sample(
        "kubelet_container_requested_resizes_total",
        resource=resource, requirement=requirement, operation=op,
    )  # fmt: skip


def with_resources(p: Pod, **res: Any) -> Pod:
    out = copy.deepcopy(p)
    out["spec"]["containers"][0]["resources"] = res  # type: ignore[typeddict-item]
    return out


def test_resize_operation_names_upstreams_four() -> None:
    assert resize_operation(0, 5) == "remove"
    assert resize_operation(5, 0) == "add"
    assert resize_operation(3, 5) == "decrease"
    assert resize_operation(7, 5) == "increase"
    assert resize_operation(5, 5) == ""


def test_each_changed_requirement_of_each_resizable_container_is_one_count() -> None:
    old = with_resources(pod("a"), requests={"cpu": "100m", "memory": "64Mi"},
                         limits={"memory": "128Mi"})  # fmt: skip
    new = with_resources(pod("a"), requests={"cpu": "200m", "memory": "64Mi"},
                         limits={"cpu": "1"})  # fmt: skip
    # A sidecar counts; an init container that runs to completion cannot resize.
    sidecar = {"name": "s", "image": "i", "restartPolicy": "Always",
               "resources": {"requests": {"memory": "10Mi"}}}  # fmt: skip
    oneshot = {"name": "i", "image": "i", "resources": {"requests": {"cpu": "1"}}}
    old["spec"]["initContainers"] = [copy.deepcopy(sidecar), copy.deepcopy(oneshot)]  # type: ignore[list-item]
    sidecar["resources"] = {"requests": {"memory": "5Mi"}}
    oneshot["resources"] = {"requests": {"cpu": "2"}}
    new["spec"]["initContainers"] = [sidecar, oneshot]  # type: ignore[list-item]
    assert sorted(requested_resizes(old, new)) == [
        ("cpu", "limits", "add"),
        ("cpu", "requests", "increase"),
        ("memory", "limits", "remove"),
        ("memory", "requests", "decrease"),
    ]
    m, _ = manager()
    before = {k: requested(*k) for k in requested_resizes(old, new)}
    m.record_requested(old, new)
    for k, v in before.items():
        assert requested(*k) == v + 1, k
    # The same spec again, or a pod seen for the first time, counts nothing.
    m.record_requested(new, new)
    m.record_requested(None, new)
    for k, v in before.items():
        assert requested(*k) == v + 1, k


def test_nothing_is_counted_with_the_gate_off() -> None:
    m, _ = manager()
    m.enabled = False
    old, new = pod("a"), pod("a", cpu="300m")
    before = requested("cpu", "requests", "increase")
    m.record_requested(old, new)
    assert requested("cpu", "requests", "increase") == before


def test_infeasible_resizes_count_by_reason_detail_each_time_they_are_seen() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a"))
    before = sample(
        "kubelet_pod_infeasible_resizes_total", reason_detail="insufficient_node_allocatable"
    )
    m.handle_resize(pod("a", cpu="5"))
    m.handle_resize(pod("a", cpu="6"))
    after = sample(
        "kubelet_pod_infeasible_resizes_total", reason_detail="insufficient_node_allocatable"
    )
    assert after == before + 2
    static = pod("s")
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    admit(m, a, static)
    b = sample("kubelet_pod_infeasible_resizes_total", reason_detail="static_pod")
    m.handle_resize(pod("s", cpu="200m") | {"metadata": static["metadata"]})
    assert sample("kubelet_pod_infeasible_resizes_total", reason_detail="static_pod") == b + 1


def test_cpu_manager_static_refusal_has_upstreams_detail() -> None:
    m, a = manager(cpu_manager_static=True)
    admit(m, a, pod("g", cpu="1", limits=True))
    detail = "guaranteed_pod_cpu_manager_static_policy"
    before = sample("kubelet_pod_infeasible_resizes_total", reason_detail=detail)
    m.handle_resize(pod("g", cpu="2", limits=True))
    assert sample("kubelet_pod_infeasible_resizes_total", reason_detail=detail) == before + 1


def test_pending_gauge_follows_the_conditions_and_a_deferred_one_accepted_counts_its_trigger() -> (
    None
):
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a", cpu="400m"))
    admit(m, a, pod("b", cpu="500m"))
    admit(m, a, pod("c"))
    want = pod("a", cpu="700m", gen=2)
    m.handle_resize(want)
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 1
    m.handle_resize(pod("c", cpu="50"))
    assert sample("kubelet_pod_pending_resizes", reason="infeasible") == 1
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 1
    accepted = sample("kubelet_pod_deferred_accepted_resizes_total", retry_trigger="pods_removed")
    a.release("b")
    assert m.retry_pending({"a": want}.get, "pods_removed") == ["a"]
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 0
    # A reason no pod has any more is not shown at all, as upstream's Reset.
    assert (
        metrics.REGISTRY.get_sample_value("kubelet_pod_pending_resizes", {"reason": "deferred"})
        is None
    )
    assert (
        sample("kubelet_pod_deferred_accepted_resizes_total", retry_trigger="pods_removed")
        == accepted + 1
    )
    # A resize accepted without having been deferred is not counted.
    updated = sample("kubelet_pod_deferred_accepted_resizes_total", retry_trigger="pod_updated")
    assert m.handle_resize(pod("a", cpu="600m", gen=3))
    assert (
        sample("kubelet_pod_deferred_accepted_resizes_total", retry_trigger="pod_updated")
        == updated
    )
    m.settle(pod("a", cpu="600m"))  # the shrink was actuated
    # A deferred one accepted on the pod's own update counts pod_updated.
    admit(m, a, pod("d", cpu="300m"))  # the node is full: 600 + 100 + 300
    m.handle_resize(pod("a", cpu="700m", gen=4))
    assert m.conditions.is_reason("a", "Deferred")
    a.release("d")
    assert m.handle_resize(pod("a", cpu="650m", gen=5))
    assert (
        sample("kubelet_pod_deferred_accepted_resizes_total", retry_trigger="pod_updated")
        == updated + 1
    )
    # The pod leaves: its pending condition goes from the gauge.
    m.remove_pod("c")
    assert (
        metrics.REGISTRY.get_sample_value("kubelet_pod_pending_resizes", {"reason": "infeasible"})
        is None
    )


def test_a_pending_condition_taken_up_after_a_restart_is_counted() -> None:
    m, _ = manager()
    m.conditions.backfill(
        "x", [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
    )
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 1
    m.conditions.backfill(
        "x", [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
    )
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 1
    m.conditions.forget("x")
    assert sample("kubelet_pod_pending_resizes", reason="deferred") == 0
