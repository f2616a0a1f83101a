"""The status of a pod the kubelet stops on its own (status/disruption.py):
the terminal phase with DisruptionTarget and Ready false; a pod whose
containers all exited 0 stays Succeeded, without the kill's reason."""

from __future__ import annotations

from typing import Any

from kubelet.status.disruption import KubeletTermination, apply

SHUTDOWN = KubeletTermination("Terminated", "going down", disruption=True)


def running() -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": "t0"},
        ],
    }


def by_type(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st["conditions"]}


def test_the_final_status_is_failed_and_never_ready() -> None:
    st = running()
    st["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "t1"}
    )
    apply(SHUTDOWN, st)
    assert (st["phase"], st["reason"], st["message"]) == ("Failed", "Terminated", "going down")
    conds = by_type(st)
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "PodFailed"
    assert conds["ContainersReady"]["status"] == "False"
    # Replaced where it stood, its transition time kept.
    assert [c["type"] for c in st["conditions"]].count("DisruptionTarget") == 1
    assert conds["DisruptionTarget"]["lastTransitionTime"] == "t1"
    assert conds["DisruptionTarget"]["reason"] == "TerminationByKubelet"


def test_succeeded_stays_succeeded_without_the_kill_reason() -> None:
    st = {"phase": "Succeeded", "conditions": []}
    apply(SHUTDOWN, st)
    assert st["phase"] == "Succeeded" and "reason" not in st and "message" not in st
    assert by_type(st)["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    evicted = {"phase": "Succeeded", "conditions": []}
    apply(KubeletTermination("Evicted", "low memory"), evicted)
    assert evicted["phase"] == "Succeeded" and "reason" not in evicted
    assert "DisruptionTarget" not in by_type(evicted)


def test_anything_not_succeeded_ends_failed_with_the_kill_reason() -> None:
    for phase in ("Pending", "Running", "Failed"):
        st = {"phase": phase, "conditions": []}
        apply(KubeletTermination("Evicted", "low memory"), st)
        assert (st["phase"], st["reason"], st["message"]) == ("Failed", "Evicted", "low memory")
