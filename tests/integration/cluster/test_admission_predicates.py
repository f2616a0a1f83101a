"""Admission's node predicates against the real API server: the Node the
kubelet matches pods against is the one the API server has (labels, taints and
allocatable an admin sets count), and a refused pod fails with upstream's
reason and a warning event while the node's other pods keep running."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import start_node

pytestmark = pytest.mark.cluster

NODE = "py-admit-node"
TAINT = "admission-test"
PREFIX = "Pod was rejected: "
AFFINITY = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
TAINTS = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("admission-predicates")
    sim = start_simruntime()
    k = start_node(control_plane, tmp, sim.endpoint, node_name=NODE)
    try:
        wait_for("the Node to be Ready", k.ready, timeout=60)
        yield k
    finally:
        k.kubectl("taint", "node", NODE, f"{TAINT}-", check=False)
        k.stop()
        sim.stop()
        print(f"kubelet log: {k.log}")


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    requests = spec.pop("requests", {})
    container = {"name": "main", "image": "busybox:1.36", "command": ["sleep", "1000"],
                 "resources": {"requests": requests, "limits": requests}}  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"suite": "admission"}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                 "containers": [container], **spec},
    }  # fmt: skip


def phase_of(k: KubeletProcess, name: str, phase: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        p: dict[str, Any] = k.kubectl_json("get", "pod", name, "-n", "default")
        return p if p["status"].get("phase") == phase else None

    return wait_for(f"pod {name} to be {phase}", reached, timeout=60)


def refused(k: KubeletProcess, name: str, reason: str, message: str) -> None:
    """Failed with the reason and message, and a warning event saying so."""
    p = phase_of(k, name, "Failed")
    assert (p["status"]["reason"], p["status"]["message"]) == (reason, PREFIX + message)
    assert not p["status"].get("containerStatuses")  # never started

    def event() -> list[dict[str, Any]]:
        return [e for e in k.events("default")
                if e["involvedObject"].get("name") == name and e["reason"] == reason]  # fmt: skip

    (ev,) = wait_for(f"the {reason} event of {name}", event, timeout=30)
    assert ev["type"] == "Warning" and ev["message"] == message


def test_node_selector_refuses_until_an_admin_labels_the_node(node: KubeletProcess) -> None:
    tolerant = [{"key": TAINT, "operator": "Exists"}]  # outlives the taint test below
    node.create(manifest("steady", tolerations=tolerant))
    phase_of(node, "steady", "Running")
    node.create(manifest("wants-ssd", nodeSelector={"disktype": "ssd"}))
    refused(node, "wants-ssd", "NodeAffinity", AFFINITY)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "disktype", "operator": "In", "values": ["ssd"]}]}]}}}  # fmt: skip
    node.create(manifest("wants-ssd-affinity", affinity=affinity))
    refused(node, "wants-ssd-affinity", "NodeAffinity", AFFINITY)
    # The label an admin adds is what the next admission sees (the node watch).
    node.kubectl("label", "node", NODE, "disktype=ssd")
    node.create(manifest("wants-ssd-2", nodeSelector={"disktype": "ssd"}, affinity=affinity))
    phase_of(node, "wants-ssd-2", "Running")
    assert phase_of(node, "steady", "Running")


def test_no_execute_taint_refuses_pods_that_do_not_tolerate_it(node: KubeletProcess) -> None:
    node.kubectl("taint", "node", NODE, f"{TAINT}=yes:NoExecute")
    node.create(manifest("intolerant"))
    refused(node, "intolerant", "TaintToleration", TAINTS)
    toleration = {"key": TAINT, "operator": "Equal", "value": "yes", "effect": "NoExecute"}
    node.create(manifest("tolerant", tolerations=[toleration]))
    phase_of(node, "tolerant", "Running")
    node.kubectl("taint", "node", NODE, f"{TAINT}-")


def test_extended_resources_fit_the_allocatable_the_api_server_has(node: KubeletProcess) -> None:
    # An admin advertises one dongle the way the docs say (capacity only); the
    # kubelet makes it allocatable. Nobody serves example.com/gone (as a device
    # plugin that went away leaves it: 0).
    patch = {"status": {"capacity": {"example.com/dongle": "1", "example.com/gone": "0"}}}
    node.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge",
                 "-p", json.dumps(patch))  # fmt: skip

    def allocatable() -> bool:
        alloc = node.kubectl_json("get", "node", NODE)["status"]["allocatable"]
        return alloc.get("example.com/dongle") == "1" and alloc.get("example.com/gone") == "0"

    wait_for("the kubelet to make the advertised resources allocatable", allocatable, timeout=30)
    node.create(manifest("one-dongle", requests={"example.com/dongle": "1"}))
    phase_of(node, "one-dongle", "Running")
    # (Created after a pod ran, so the node watch has long delivered the patch.)
    node.create(manifest("gone", requests={"example.com/gone": "1"}))
    refused(node, "gone", "OutOfexample.com/gone",
            "Node didn't have enough resource: example.com/gone, requested: 1, used: 0, capacity: 0")  # fmt: skip
    node.create(manifest("another-dongle", requests={"example.com/dongle": "1"}))
    refused(node, "another-dongle", "OutOfexample.com/dongle",
            "Node didn't have enough resource: example.com/dongle, requested: 1, used: 1, capacity: 1")  # fmt: skip
    # Not on the node at all: a cluster-level or DRA resource, admitted as upstream does.
    node.create(manifest("cluster-level", requests={"example.com/elsewhere": "1"}))
    phase_of(node, "cluster-level", "Running")
    node.kubectl("delete", "pods", "-n", "default", "-l", "suite=admission", "--wait=false")
