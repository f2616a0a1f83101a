"""PodObservedGenerationTracking: status.observedGeneration and each kubelet
condition's observedGeneration follow metadata.generation of the pod the status
was made from (CalculatePod{Status,Condition}ObservedGeneration upstream)."""

from __future__ import annotations

from typing import Any

from kubelet.container.runtime import PodStatus
from kubelet.features import Feature, FeatureGate
from kubelet.status.generate import generate
from kubelet.status.generation import (
    condition_observed_generation,
    generation,
    status_observed_generation,
)
from kubelet.status.status_manager import StatusManager, status_patch

KUBELET_CONDITIONS = {
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
}


def pod(gen: int | None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u"}
    if gen is not None:
        md["generation"] = gen
    return {
        "metadata": md,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": status or {},
    }


def test_the_gate_is_known_beta_and_on_by_default() -> None:
    assert FeatureGate().enabled(Feature.PodObservedGenerationTracking)
    assert not FeatureGate({"PodObservedGenerationTracking": False}).enabled(
        Feature.PodObservedGenerationTracking
    )


def test_status_generation_follows_the_gate_or_a_value_already_set() -> None:
    assert generation(pod(None)) == 0
    assert status_observed_generation(pod(3), tracking=True) == 3
    assert status_observed_generation(pod(3), tracking=False) == 0
    # Once the API copy carries one, it keeps following (the API server would
    # keep a value the kubelet tried to clear).
    assert status_observed_generation(pod(3, {"observedGeneration": 2}), tracking=False) == 3


def test_condition_generation_follows_the_gate_or_the_previous_condition() -> None:
    old = [{"type": "Ready", "observedGeneration": 1}, {"type": "Initialized"}]
    assert condition_observed_generation(old, 4, "Ready", True) == 4
    assert condition_observed_generation(old, 4, "Ready", False) == 4
    assert condition_observed_generation(old, 4, "Initialized", False) == 0
    assert condition_observed_generation([], 4, "PodScheduled", False) == 0


def test_every_kubelet_condition_carries_the_generation() -> None:
    api = generate(pod(7), PodStatus("u"), {}, ["10.0.0.1"], None)
    conds = {c["type"]: c for c in api["conditions"]}
    assert set(conds) == KUBELET_CONDITIONS
    assert {c["observedGeneration"] for c in conds.values()} == {7}
    # Gate off: no field at all (not 0), as the API's omitempty.
    api = generate(pod(7), PodStatus("u"), {}, ["10.0.0.1"], None, tracking=False)
    assert all("observedGeneration" not in c for c in api["conditions"])
    # A static pod from a file has no generation: nothing to report.
    api = generate(pod(None), PodStatus("u"), {}, ["10.0.0.1"], None)
    assert all("observedGeneration" not in c for c in api["conditions"])


def test_conditions_others_own_keep_their_generation() -> None:
    foreign = {"type": "example.com/gate", "status": "True", "observedGeneration": 1}
    api = generate(pod(5, {"conditions": [foreign]}), PodStatus("u"), {}, [], None)
    assert foreign in api["conditions"]


def test_a_spec_update_moves_the_conditions_to_the_new_generation_and_patches_them() -> None:
    first = generate(pod(1), PodStatus("u"), {}, [], None)
    second = generate(pod(2), PodStatus("u"), {}, [], first)
    assert {c["observedGeneration"] for c in second["conditions"]} == {2}
    patch = status_patch(first, second)
    assert {c["type"] for c in patch["conditions"]} == KUBELET_CONDITIONS
    # Nothing else changed: transition times are kept.
    before = {c["type"]: c["lastTransitionTime"] for c in first["conditions"]}
    assert all(c["lastTransitionTime"] == before[c["type"]] for c in second["conditions"])


def test_the_disruption_target_set_by_the_kubelet_is_carried_over() -> None:
    disrupted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "m",
        "observedGeneration": 1,
    }
    first = generate(pod(1), PodStatus("u"), {}, [], None)
    first["conditions"].append(disrupted)
    # The API copy does not have it yet; the next status still does.
    second = generate(pod(1), PodStatus("u"), {}, [], first)
    assert [c for c in second["conditions"] if c["type"] == "DisruptionTarget"] == [disrupted]


def test_the_status_manager_sets_status_generation_and_never_steps_it_back() -> None:
    sm = StatusManager()
    assert sm.set_pod_status("u", {"phase": "Pending"}, pod(1))
    assert sm.get("u") == {"phase": "Pending", "observedGeneration": 1}
    assert sm.set_pod_status("u", {"phase": "Pending"}, pod(3))
    assert sm.get("u")["observedGeneration"] == 3
    # An older copy of the pod synced late does not undo it...
    assert not sm.set_pod_status("u", {"phase": "Pending"}, pod(2))
    assert sm.get("u")["observedGeneration"] == 3
    # ...nor does a status set without its pod (it answers the same generation).
    assert sm.set_pod_status("u", {"phase": "Running"})
    assert sm.get("u") == {"phase": "Running", "observedGeneration": 3}


def test_the_status_manager_leaves_it_out_with_the_gate_off() -> None:
    sm = StatusManager(tracking=False)
    sm.set_pod_status("u", {"phase": "Pending"}, pod(4))
    assert sm.get("u") == {"phase": "Pending"}
    # ...unless the API copy already carries one.
    sm.set_pod_status("v", {"phase": "Pending"}, pod(4, {"observedGeneration": 2}))
    assert sm.get("v") == {"phase": "Pending", "observedGeneration": 4}


def test_the_status_patch_sends_the_new_generation() -> None:
    api = {"phase": "Running", "observedGeneration": 1}
    assert status_patch(api, {"phase": "Running", "observedGeneration": 2}) == {
        "observedGeneration": 2
    }
    assert status_patch(api, {"phase": "Running", "observedGeneration": 1}) == {}


def test_a_kill_by_the_kubelet_fails_the_pod_with_its_disruption_condition() -> None:
    from kubelet.status.terminal import failed_status

    old = generate(pod(2), PodStatus("u"), {}, [], None)
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
            "message": "low"}  # fmt: skip
    st = failed_status(old, pod(2), "Evicted", "low", cond)
    assert (st["phase"], st["reason"], st["message"]) == ("Failed", "Evicted", "low")
    got = [c for c in st["conditions"] if c["type"] == "DisruptionTarget"]
    assert len(got) == 1 and got[0]["observedGeneration"] == 2
    assert {k: got[0][k] for k in cond} == cond and got[0]["lastTransitionTime"]
    # Kubelet conditions are kept as they were; without a condition nothing is added.
    assert len(st["conditions"]) == len(old["conditions"]) + 1
    assert failed_status(old, pod(2), "Evicted", "m")["conditions"] == old["conditions"]
    # Gate off: no generation on it.
    st = failed_status(old, pod(2), "Evicted", "low", cond, tracking=False)
    assert "observedGeneration" not in st["conditions"][-1]
