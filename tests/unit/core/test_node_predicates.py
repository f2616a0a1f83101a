"""Admission's node predicates (NodeAffinity, NodeName, TaintToleration) and the
fit of extended resources and hugepages, with upstream's reasons and messages."""

from __future__ import annotations

from typing import Any

from kubelet.lifecycle.node_predicates import (
    node_affinity_mismatch,
    node_name_mismatch,
    tolerates,
    untolerated_no_execute,
)
from kubelet.lifecycle.predicate import Admitter
from kubelet.types import CONFIG_SOURCE, Node, Pod, as_node, as_pod

AFFINITY = ("NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")  # fmt: skip
NAME = ("NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")
TAINTS = ("TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")  # fmt: skip
PORTS = ("NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")  # fmt: skip


def node(labels: dict[str, str] | None = None, taints: list[Any] | None = None,
         allocatable: dict[str, str] | None = None, name: str = "node-a") -> Node:  # fmt: skip
    return as_node({
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": allocatable or {}},
    })  # fmt: skip


def pod(**spec: Any) -> Pod:
    container = {"name": "c", "resources": {"requests": spec.pop("requests", {})}}
    return as_pod(
        {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [container], **spec}}
    )


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}  # fmt: skip


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def reason(r: Any) -> tuple[str, str] | None:
    return None if r is None else (r.reason, r.message)


def test_node_selector_needs_every_label() -> None:
    n = node({"zone": "a", "disk": "ssd"})
    assert node_affinity_mismatch(pod(nodeSelector={"zone": "a"}), n) is None
    assert node_affinity_mismatch(pod(nodeSelector={"zone": "a", "disk": "ssd"}), n) is None
    assert reason(node_affinity_mismatch(pod(nodeSelector={"zone": "b"}), n)) == AFFINITY
    assert reason(node_affinity_mismatch(pod(nodeSelector={"gpu": ""}), n)) == AFFINITY
    assert node_affinity_mismatch(pod(), node()) is None


def test_required_affinity_operators() -> None:
    n = node({"zone": "a", "cores": "8"})

    def fits(*exprs: dict[str, Any]) -> bool:
        return node_affinity_mismatch(pod(affinity=required({"matchExpressions": list(exprs)})), n) is None  # fmt: skip

    assert fits(expr("zone", "In", "a", "b")) and not fits(expr("zone", "In", "b"))
    assert fits(expr("zone", "NotIn", "b")) and not fits(expr("zone", "NotIn", "a"))
    assert fits(expr("absent", "NotIn", "x"))  # NotIn holds for a missing label
    assert fits(expr("zone", "Exists")) and not fits(expr("absent", "Exists"))
    assert fits(expr("absent", "DoesNotExist")) and not fits(expr("zone", "DoesNotExist"))
    assert fits(expr("cores", "Gt", "4")) and not fits(expr("cores", "Gt", "8"))
    assert fits(expr("cores", "Lt", "16")) and not fits(expr("cores", "Lt", "8"))
    assert not fits(expr("zone", "Gt", "1"))  # a label that is not an integer never compares
    assert not fits(expr("absent", "Lt", "1"))
    # Expressions of a term are ANDed.
    assert fits(expr("zone", "In", "a"), expr("cores", "Gt", "1"))
    assert not fits(expr("zone", "In", "a"), expr("cores", "Gt", "9"))
    # Invalid requirements select nothing (upstream fails to parse them).
    assert not fits(expr("zone", "In"))
    assert not fits(expr("zone", "Exists", "a"))
    assert not fits(expr("cores", "Gt", "1", "2")) and not fits(expr("cores", "Gt", "x"))
    assert not fits(expr("zone", "Near", "a"))


def test_terms_are_ored_and_empty_terms_select_nothing() -> None:
    n = node({"zone": "a"})
    no, yes = {"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("zone", "In", "a")]}  # fmt: skip
    assert node_affinity_mismatch(pod(affinity=required(no, yes)), n) is None
    assert reason(node_affinity_mismatch(pod(affinity=required(no)), n)) == AFFINITY
    assert reason(node_affinity_mismatch(pod(affinity=required({})), n)) == AFFINITY
    assert reason(node_affinity_mismatch(pod(affinity=required()), n)) == AFFINITY
    # An invalid term does not hide a valid one after it.
    assert node_affinity_mismatch(pod(affinity=required({"matchExpressions": [expr("zone", "In")]}, yes)), n) is None  # fmt: skip
    # Only preferred terms, or no node affinity at all: nothing is required.
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert node_affinity_mismatch(pod(affinity=preferred), n) is None
    assert node_affinity_mismatch(pod(affinity={"podAffinity": {}}), n) is None


def test_node_selector_and_affinity_are_anded() -> None:
    n = node({"zone": "a"})
    aff = required({"matchExpressions": [expr("zone", "In", "a")]})
    assert node_affinity_mismatch(pod(nodeSelector={"zone": "a"}, affinity=aff), n) is None
    assert reason(node_affinity_mismatch(pod(nodeSelector={"zone": "b"}, affinity=aff), n)) == AFFINITY  # fmt: skip


def test_match_fields_on_the_node_name() -> None:
    n = node(name="node-a")

    def fits(*fields: dict[str, Any]) -> bool:
        return node_affinity_mismatch(pod(affinity=required({"matchFields": list(fields)})), n) is None  # fmt: skip

    assert fits(expr("metadata.name", "In", "node-a"))
    assert not fits(expr("metadata.name", "In", "node-b"))
    assert fits(expr("metadata.name", "NotIn", "node-b"))
    assert not fits(expr("metadata.name", "NotIn", "node-a"))
    assert not fits(expr("metadata.name", "In", "node-a", "node-b"))  # one value only
    assert not fits(expr("metadata.name", "Exists"))
    both = {"matchFields": [expr("metadata.name", "In", "node-a")], "matchExpressions": [expr("x", "Exists")]}  # fmt: skip
    assert reason(node_affinity_mismatch(pod(affinity=required(both)), n)) == AFFINITY


def test_node_name() -> None:
    assert node_name_mismatch(pod(), node()) is None
    assert node_name_mismatch(pod(nodeName="node-a"), node()) is None
    assert reason(node_name_mismatch(pod(nodeName="node-b"), node())) == NAME


def test_toleration_matching() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}, taint)
    assert tolerates({"key": "k", "value": "v"}, taint)  # no operator is Equal; no effect, any
    assert not tolerates({"key": "k", "value": "w"}, taint)
    assert tolerates({"key": "k", "operator": "Exists"}, taint)
    assert tolerates({"operator": "Exists"}, taint)  # empty key with Exists: every taint
    assert not tolerates({"operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert not tolerates({"key": "k", "operator": "Lt", "value": "v"}, taint)
    assert tolerates({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoExecute"})


def test_only_untolerated_no_execute_taints_refuse() -> None:
    n = node(taints=[{"key": "soft", "effect": "NoSchedule"}, {"key": "hard", "value": "x", "effect": "NoExecute"}])  # fmt: skip
    assert reason(untolerated_no_execute(pod(), n)) == TAINTS
    assert untolerated_no_execute(pod(tolerations=[{"key": "hard", "operator": "Exists"}]), n) is None  # fmt: skip
    assert untolerated_no_execute(pod(), node(taints=[{"key": "soft", "effect": "NoSchedule"}])) is None  # fmt: skip
    static = pod()
    static["metadata"]["annotations"] = {CONFIG_SOURCE: "file"}
    assert untolerated_no_execute(static, n) is None  # static pods are exempt


def test_extended_resources_fit_the_nodes_allocatable() -> None:
    a = Admitter(10, 4000, 2**30)
    n = node(allocatable={"example.com/foo": "2", "hugepages-2Mi": "4Mi"})
    assert a.admit("1", pod(requests={"example.com/foo": "1"}), n) is None
    r = a.admit("2", pod(requests={"example.com/foo": "2"}), n)
    assert reason(r) == ("OutOfexample.com/foo", "Node didn't have enough resource: example.com/foo, requested: 2, used: 1, capacity: 2")  # fmt: skip
    # Capacity 0 (a device plugin that went away) refuses any request.
    r = a.admit("3", pod(requests={"example.com/gone": "1"}), node(allocatable={"example.com/gone": "0"}))  # fmt: skip
    assert (
        r is not None and r.reason == "OutOfexample.com/gone" and r.message.endswith("capacity: 0")
    )
    # Not listed at all: a cluster-level or DRA resource, left to the scheduler as upstream.
    assert a.admit("4", pod(requests={"example.com/unlisted": "5"}), n) is None
    # Hugepages are not extended resources: unlisted means none.
    r = a.admit("5", pod(requests={"hugepages-1Gi": "1Gi"}), n)
    assert r is not None and r.reason == "OutOfhugepages-1Gi"
    assert a.admit("6", pod(requests={"hugepages-2Mi": "4Mi"}), n) is None
    a.release("1")
    assert a.admit("2", pod(requests={"example.com/foo": "2"}), n) is None


def test_the_first_failure_wins_in_upstreams_order() -> None:
    a = Admitter(10, 1000, 2**30)
    n = node({"zone": "a"}, [{"key": "t", "effect": "NoExecute"}], {"example.com/foo": "0"})
    everything = pod(requests={"cpu": "2"}, nodeSelector={"zone": "b"}, nodeName="other")
    assert a.admit("x", everything, n).reason == "OutOfcpu"  # type: ignore[union-attr]
    del everything["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    assert reason(a.admit("x", everything, n)) == AFFINITY
    everything["spec"]["nodeSelector"] = {"zone": "a"}
    assert reason(a.admit("x", everything, n)) == NAME
    everything["spec"]["nodeName"] = "node-a"
    held = pod()
    held["spec"]["containers"][0]["ports"] = [{"containerPort": 1, "hostPort": 81}]
    assert a.admit("h", held, node()) is None
    everything["spec"]["containers"][0]["ports"] = [{"containerPort": 1, "hostPort": 81}]
    assert reason(a.admit("x", everything, n)) == PORTS
    everything["spec"]["containers"][0]["ports"] = []
    assert reason(a.admit("x", everything, n)) == TAINTS
    everything["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert a.admit("x", everything, n) is None
    assert len(a) == 2


def test_named_requests_count_sidecars_as_upstream() -> None:
    from kubelet.lifecycle.predicate import named_requests

    def c(n: str, foo: str, always: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": n, "resources": {"requests": {"example.com/foo": foo}}}
        if always:
            out["restartPolicy"] = "Always"
        return out

    alloc = {"example.com/foo": 100}
    p = as_pod({"metadata": {}, "spec": {
        "initContainers": [c("side", "2", True), c("init", "5")],
        "containers": [c("main", "1")], "overhead": {"example.com/foo": "1"}}})  # fmt: skip
    # The init step runs beside the sidecar (5 + 2) > the sum (1 + 2); plus overhead.
    assert named_requests(p, alloc) == {"example.com/foo": 8}
    assert named_requests(p, {}) == {}  # not listed by the node: left out


def test_node_lister_follows_the_watch_and_falls_back_to_the_initial_node() -> None:
    import asyncio

    from kubelet.node_lister import NodeLister, with_allocatable

    initial = node({"from": "flags"})
    lister = NodeLister(None, "node-a", lambda: initial)
    assert lister.synced.is_set() and lister.get() is initial

    async def events() -> None:
        await lister._on_list([{"metadata": {"name": "node-a", "labels": {"admin": "yes"}}}])
        assert lister.get()["metadata"]["labels"] == {"admin": "yes"}
        await lister._on_event("MODIFIED", {"metadata": {"name": "other"}})
        assert lister.get()["metadata"]["labels"] == {"admin": "yes"}
        await lister._on_event("DELETED", {"metadata": {"name": "node-a"}})
        assert lister.get() is initial

    asyncio.run(events())
    raised = with_allocatable(node(allocatable={"example.com/d": "1"}), {"example.com/d": 3, "x.io/y": 1})  # fmt: skip
    assert raised["status"]["allocatable"] == {"example.com/d": "3", "x.io/y": "1"}
    kept = with_allocatable(node(allocatable={"example.com/d": "5"}), {"example.com/d": 3})
    assert kept["status"]["allocatable"] == {"example.com/d": "5"}


def test_the_lister_of_a_cluster_node_is_synced_by_its_first_list() -> None:
    """The API pod source waits on `synced`: unset until the first list (a pod
    is never admitted against a node not read yet), set by it even when the
    Node does not exist yet (first registration)."""
    import asyncio
    from typing import cast

    from kubelet.client.rest import APIClient
    from kubelet.node_lister import NodeLister

    lister = NodeLister(cast(APIClient, object()), "node-a", lambda: node())
    assert not lister.synced.is_set()
    asyncio.run(lister._on_list([]))
    assert lister.synced.is_set() and lister.watched() is None


def test_an_unlisted_extended_resource_is_named_once_in_the_log(caplog: Any) -> None:
    a = Admitter(10, 4000, 2**30)
    with caplog.at_level("INFO", logger="kubelet.lifecycle.predicate"):
        assert a.admit("1", pod(requests={"example.com/unlisted": "1"}), node()) is None
        assert a.admit("2", pod(requests={"example.com/unlisted": "1"}), node()) is None
    lines = [r.getMessage() for r in caplog.records if "example.com/unlisted" in r.getMessage()]
    assert len(lines) == 1 and "not checked at admission" in lines[0]
