"""The topology manager: hint merging under each policy (against vectors the
Go code computed), scopes, policy options and admission rejections."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import (
    NUMAInfo,
    Policy,
    PolicyOptions,
    TopologyHint,
    new_policy_options,
)
from kubelet.cm.topologymanager.topology_manager import (
    AdmissionError,
    TopologyManager,
    new_topology_manager,
)
from kubelet.features import FeatureGate
from tests.unit.cm.topologies import vectors


def h(bits: list[int] | None, preferred: bool) -> TopologyHint:
    return TopologyHint(None if bits is None else bitmask.new_bitmask(bits), preferred)


def test_merge_matches_go_vectors() -> None:
    cases = vectors("topologymanager.json")["merge"]
    assert len(cases) >= 800
    for v in cases:
        numa = NUMAInfo(
            tuple(v["nodes"]),
            {n: tuple(row) for n, row in zip(v["nodes"], v.get("distances") or [], strict=False)},
        )
        policy = Policy(
            v["policy"], numa, PolicyOptions(prefer_closest_numa=v.get("preferClosest", False))
        )
        providers: list[Any] = []
        for p in v["providers"]:
            if p.get("nil"):
                providers.append(None)
                continue
            for name in p["order"]:
                hs = p["resources"][name]
                providers.append(
                    {name: None if hs is None else [h(x["bits"], x["preferred"]) for x in hs]}
                )
        best, admit = policy.merge(providers)
        want = v["result"]
        got_bits = None if best.numa_affinity is None else bitmask.get_bits(best.numa_affinity)
        assert (got_bits, best.preferred, admit) == (
            want.get("bits"),
            want["preferred"],
            v["admit"],
        ), v


def test_bitmask_iteration_order_and_narrowness() -> None:
    seen: list[list[int]] = []
    bitmask.iterate_bitmasks([0, 1, 2], lambda m: seen.append(bitmask.get_bits(m)))
    assert seen == [[0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]]
    assert bitmask.is_narrower_than(0b01, 0b11)
    assert bitmask.is_narrower_than(0b011, 0b101)  # same width: lower nodes first
    assert bitmask.to_string(0b1) == "01" and bitmask.to_string(0b101) == "0101"
    with pytest.raises(ValueError, match="range 0-63"):
        bitmask.new_bitmask([64])


def test_policy_options_are_gated_and_checked() -> None:
    gates = FeatureGate()
    assert new_policy_options({"prefer-closest-numa-nodes": "true"}, gates).prefer_closest_numa
    assert (
        new_policy_options({"max-allowable-numa-nodes": "12"}, gates).max_allowable_numa_nodes == 12
    )
    with pytest.raises(ValueError, match="should not be less than 8"):
        new_policy_options({"max-allowable-numa-nodes": "4"}, gates)
    with pytest.raises(ValueError, match="beta-level options not enabled"):
        new_policy_options(
            {"max-allowable-numa-nodes": "9"},
            FeatureGate({"TopologyManagerPolicyBetaOptions": False}),
        )
    with pytest.raises(ValueError, match='unknown Topology Manager Policy option: "x"'):
        new_policy_options({"x": "1"}, gates)


def test_new_manager_refuses_too_many_numa_nodes_and_unknown_names() -> None:
    nine = list(range(9))
    with pytest.raises(ValueError, match="more than 8 NUMA Nodes"):
        new_topology_manager(nine, {}, "restricted", "container", {}, FeatureGate())
    assert new_topology_manager(
        nine, {}, "restricted", "pod", {"max-allowable-numa-nodes": "9"}, FeatureGate()
    )
    with pytest.raises(ValueError, match='unknown scope: "node"'):
        new_topology_manager([0], {}, "restricted", "node", {}, FeatureGate())
    with pytest.raises(ValueError, match="error getting NUMA distances"):
        new_topology_manager(
            [0, 1],
            {},
            "best-effort",
            "container",
            {"prefer-closest-numa-nodes": "true"},
            FeatureGate(),
        )


class Provider:
    """A hint provider answering fixed hints and recording allocations."""

    def __init__(self, hints: Any, fail: Exception | None = None) -> None:
        self.hints = hints
        self.fail = fail
        self.allocated: list[str] = []
        self.pod_hint_calls = 0

    def get_topology_hints(self, pod: Any, container: Any) -> Any:
        return self.hints

    def get_pod_topology_hints(self, pod: Any) -> Any:
        self.pod_hint_calls += 1
        return self.hints

    def allocate(self, pod: Any, container: Any) -> None:
        if self.fail is not None:
            raise self.fail
        self.allocated.append(container["name"])


POD = {
    "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
    "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}, {"name": "b"}]},
}


def manager(
    policy: str, scope: str = "container", nodes: tuple[int, ...] = (0, 1)
) -> TopologyManager:
    return new_topology_manager(list(nodes), {}, policy, scope, {}, FeatureGate())


def test_single_numa_node_rejects_what_spans_two_nodes_with_upstreams_reason() -> None:
    m = manager("single-numa-node")
    m.add_hint_provider(Provider({"cpu": [h([0, 1], True)]}))
    r = m.admit(POD)
    assert r is not None
    assert (r.reason, r.message) == (
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    )


def test_restricted_admits_preferred_and_records_the_affinity() -> None:
    m = manager("restricted")
    p = Provider({"cpu": [h([1], True), h([0, 1], False)]})
    m.add_hint_provider(p)
    assert m.admit(POD) is None
    assert p.allocated == ["i", "a", "b"]
    assert m.get_affinity("u1", "a") == h([1], True)


def test_best_effort_admits_even_unsatisfiable_hints() -> None:
    m = manager("best-effort")
    m.add_hint_provider(Provider({"cpu": []}))
    assert m.admit(POD) is None
    assert m.get_affinity("u1", "a") == h([0, 1], False)


def test_pod_scope_merges_once_for_the_whole_pod() -> None:
    m = manager("restricted", "pod")
    p = Provider({"cpu": [h([0], True)]})
    m.add_hint_provider(p)
    assert m.admit(POD) is None
    assert p.pod_hint_calls == 1
    assert {m.get_affinity("u1", c).numa_affinity for c in ("i", "a", "b")} == {1}


def test_allocation_errors_become_the_pods_rejection() -> None:
    class SMT(AdmissionError):
        reason = "SMTAlignmentError"

    m = manager("none")
    m.add_hint_provider(Provider(None, SMT("SMT Alignment Error: x")))
    r = m.admit(POD)
    assert r is not None and (r.reason, r.message) == (
        "SMTAlignmentError",
        "SMT Alignment Error: x",
    )
    m = manager("restricted")
    m.add_hint_provider(Provider(None, AdmissionError("not enough cpus available")))
    r = m.admit(POD)
    assert r is not None and r.reason == "UnexpectedAdmissionError"
    assert r.message == "Allocate failed due to not enough cpus available, which is unexpected"


def test_removing_containers_and_pods_forgets_their_hints() -> None:
    m = manager("restricted")
    m.add_hint_provider(Provider({"cpu": [h([0], True)]}))
    assert m.admit(POD) is None
    m.add_container(POD, {"name": "a"}, "cid-a")
    m.remove_container("cid-a")
    assert m.get_affinity("u1", "a") == TopologyHint(None, False)
    assert m.get_affinity("u1", "b") == h([0], True)
    m.remove_pod("u1")
    assert m.get_affinity("u1", "b") == TopologyHint(None, False)
