"""Admission at the door (resource fit, pod count) and the status patch diff."""

from __future__ import annotations

from kubelet.lifecycle.predicate import Admitter, pod_requests
from kubelet.status.status_manager import status_patch


def pod(cpu: str | None = None, mem: str | None = None, init_cpu: str | None = None) -> dict:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v}
    spec: dict = {"containers": [{"name": "a", "resources": {"requests": req}}]}
    if init_cpu:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": init_cpu}}}]
    return {"metadata": {"uid": "x"}, "spec": spec}


def test_requests_take_the_bigger_of_containers_and_init_containers() -> None:
    assert pod_requests(pod("250m", "64Mi")).cpu_m == 250
    assert pod_requests(pod("250m", "64Mi")).memory == 64 * 2**20
    assert pod_requests(pod("250m", init_cpu="1")).cpu_m == 1000
    assert pod_requests(pod("2", init_cpu="1")).cpu_m == 2000


def test_out_of_pods_cpu_and_memory_with_upstream_reasons_and_release() -> None:
    a = Admitter(max_pods=2, allocatable_cpu_m=1000, allocatable_memory=1000)
    assert a.admit("1", pod("600m")) is None
    r = a.admit("2", pod("500m"))
    assert r is not None and r.reason == "OutOfcpu"
    assert r.message == (
        "Node didn't have enough resource: cpu, requested: 500, used: 600, capacity: 1000"
    )
    r = a.admit("2", pod(mem="2k"))
    assert r is not None and r.reason == "OutOfmemory"
    assert a.admit("2", pod()) is None  # BestEffort fits anywhere...
    r = a.admit("3", pod())  # ...but not past maxPods
    assert r is not None and r.reason == "OutOfpods"
    assert r.message.endswith("pods, requested: 1, used: 2, capacity: 2")
    assert a.admit("1", pod("600m")) is None  # already admitted: not counted twice
    a.release("1")
    assert a.admit("3", pod("900m")) is None
    assert a.used.cpu_m == 900 and len(a) == 2


def test_a_pod_for_another_os_is_refused_with_upstream_reasons() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000)
    windows = pod()
    windows["spec"]["os"] = {"name": "windows"}
    r = a.admit("w", windows)
    assert r is not None and r.reason == "PodOSNotSupported"
    assert r.message == "Failed to admit pod as the OS field doesn't match node OS"
    labelled = pod()
    labelled["metadata"]["labels"] = {"kubernetes.io/os": "windows"}
    r = a.admit("l", labelled)
    assert r is not None and r.reason == "PodOSSelectorNodeLabelDoesNotMatch"
    linux = pod()
    linux["spec"]["os"] = {"name": "linux"}
    linux["metadata"]["labels"] = {"kubernetes.io/os": "linux"}
    assert a.admit("x", linux) is None and len(a) == 1


def test_status_patch_sends_only_changes_and_conditions_by_type() -> None:
    api = {
        "phase": "Pending",
        "hostIP": "10.0.0.1",
        "nominatedNodeName": "set-by-the-scheduler",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "t0"},
        ],
    }
    ours = {
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t9"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "t1"},
        ],
    }
    assert status_patch(api, ours) == {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t1"}],
    }
    assert status_patch(ours, ours) == {}


def test_status_patch_clears_keys_a_merge_would_keep() -> None:
    api = {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "message": "containers with unready status: [c]", "lastProbeTime": None},
        ],
        "message": "old",
    }  # fmt: skip
    ours = {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    patch = status_patch(api, ours)
    assert patch == {
        "conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": None,
             "reason": None, "message": None},
        ],
        "message": None,
    }  # fmt: skip
    # Once the API has applied it (nulls delete), there is nothing left to send.
    applied = {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}]}
    assert status_patch(applied, ours) == {}
