"""Admission at the door (resource fit, pod count) and the status patch diff."""

from __future__ import annotations

from kubelet.lifecycle.predicate import Admitter, pod_requests
from kubelet.status.status_manager import status_patch
from kubelet.types import Node

# A node with no labels, taints or extended resources: only the fit counts.
NODE: Node = {"metadata": {"name": "n"}}


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
    assert a.admit("1", pod("600m"), NODE) is None
    r = a.admit("2", pod("500m"), NODE)
    assert r is not None and r.reason == "OutOfcpu"
    assert r.message == (
        "Node didn't have enough resource: cpu, requested: 500, used: 600, capacity: 1000"
    )
    r = a.admit("2", pod(mem="2k"), NODE)
    assert r is not None and r.reason == "OutOfmemory"
    assert a.admit("2", pod(), NODE) is None  # BestEffort fits anywhere...
    r = a.admit("3", pod(), NODE)  # ...but not past maxPods
    assert r is not None and r.reason == "OutOfpods"
    assert r.message.endswith("pods, requested: 1, used: 2, capacity: 2")
    assert a.admit("1", pod("600m"), NODE) is None  # already admitted: not counted twice
    a.release("1")
    assert a.admit("3", pod("900m"), NODE) is None
    assert a.used.cpu_m == 900 and len(a) == 2


def test_a_pod_for_another_os_is_refused_with_upstream_reasons() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000)
    windows = pod()
    windows["spec"]["os"] = {"name": "windows"}
    r = a.admit("w", windows, NODE)
    assert r is not None and r.reason == "PodOSNotSupported"
    assert r.message == "Failed to admit pod as the OS field doesn't match node OS"
    labelled = pod()
    labelled["metadata"]["labels"] = {"kubernetes.io/os": "windows"}
    r = a.admit("l", labelled, NODE)
    assert r is not None and r.reason == "PodOSSelectorNodeLabelDoesNotMatch"
    linux = pod()
    linux["spec"]["os"] = {"name": "linux"}
    linux["metadata"]["labels"] = {"kubernetes.io/os": "linux"}
    assert a.admit("x", linux, NODE) is None and len(a) == 1


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


def port_pod(*ports: dict, sidecar: dict | None = None, init: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "a", "ports": list(ports)}]}
    if sidecar or init:
        spec["initContainers"] = []
    if sidecar:
        spec["initContainers"].append({"name": "s", "restartPolicy": "Always", "ports": [sidecar]})
    if init:
        spec["initContainers"].append({"name": "i", "ports": [init]})
    return {"metadata": {"uid": "x"}, "spec": spec}


def test_a_host_port_taken_by_an_admitted_pod_is_refused_with_the_nodeports_reason() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000)
    assert a.admit("web", port_pod({"containerPort": 80, "hostPort": 8080}), NODE) is None
    r = a.admit("web2", port_pod({"containerPort": 8080, "hostPort": 8080}), NODE)
    assert r is not None and r.reason == "NodePorts"
    assert r.message == (
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    )
    assert len(a) == 1  # the refused pod holds nothing
    # Another protocol, or a container port without a host port, is free.
    assert (
        a.admit("udp", port_pod({"containerPort": 1, "hostPort": 8080, "protocol": "UDP"}), NODE)
        is None
    )
    assert a.admit("plain", port_pod({"containerPort": 8080}), NODE) is None
    # Once the holder is gone the port is free again.
    a.release("web")
    assert a.admit("web2", port_pod({"containerPort": 8080, "hostPort": 8080}), NODE) is None


def test_host_ip_conflicts_as_the_scheduler_sees_them() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000)
    assert a.admit("ip1", port_pod({"hostPort": 9000, "hostIP": "10.0.0.1"}), NODE) is None
    # Another address is free; the same address or every address is not.
    assert a.admit("ip2", port_pod({"hostPort": 9000, "hostIP": "10.0.0.2"}), NODE) is None
    assert a.admit("x", port_pod({"hostPort": 9000, "hostIP": "10.0.0.1"}), NODE) is not None
    assert a.admit("x", port_pod({"hostPort": 9000}), NODE) is not None
    a.release("ip1")
    a.release("ip2")
    assert a.admit("all", port_pod({"hostPort": 9000, "hostIP": "0.0.0.0"}), NODE) is None
    assert a.admit("x", port_pod({"hostPort": 9000, "hostIP": "10.0.0.3"}), NODE) is not None


def test_sidecar_host_ports_count_and_run_to_completion_init_containers_do_not() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000)
    assert a.admit("p", port_pod(sidecar={"hostPort": 7000}, init={"hostPort": 7001}), NODE) is None
    assert a.admit("q", port_pod({"hostPort": 7000}), NODE) is not None
    assert a.admit("r", port_pod({"hostPort": 7001}), NODE) is None


def test_the_port_index_counts_holders() -> None:
    from kubelet.lifecycle.predicate import HostPort, HostPortIndex

    idx = HostPortIndex()
    p = HostPort("0.0.0.0", "TCP", 80)
    idx.add([p])
    idx.add([p])  # two holders
    idx.remove([p])
    assert idx.conflicts(HostPort("10.0.0.1", "TCP", 80))
    idx.remove([p])
    assert not idx.conflicts(HostPort("10.0.0.1", "TCP", 80)) and len(idx) == 0
