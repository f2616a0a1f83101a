"""Pods the kubelet stops on its own (node-pressure eviction, graceful node
shutdown): what their status says (the PodStatusFunc upstream hands to
killPodNow), and the DisruptionTarget condition that tells controllers why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubelet.status.generate import now

DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"


@dataclass(frozen=True)
class KubeletTermination:
    reason: str
    message: str
    # Add DisruptionTarget (reason TerminationByKubelet, this message).
    disruption: bool = False
    # A pod that already Succeeded stays Succeeded (node shutdown); else Failed.
    keep_succeeded: bool = False


def apply(term: KubeletTermination, status: dict[str, Any]) -> None:
    """Set phase, reason, message and the condition on an API pod status."""
    if not (term.keep_succeeded and status.get("phase") == "Succeeded"):
        status["phase"] = "Failed"
    status["reason"], status["message"] = term.reason, term.message
    if not term.disruption:
        return
    conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == DISRUPTION_TARGET), None)
    cond = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": old["lastTransitionTime"]
        if old is not None and old.get("status") == "True" and old.get("lastTransitionTime")
        else now(),
        "reason": TERMINATION_BY_KUBELET,
        "message": term.message,
    }
    # Replaced where it stands, else appended (UpdatePodCondition).
    status["conditions"] = (
        [cond if c is old else c for c in conditions] if old is not None else [*conditions, cond]
    )
