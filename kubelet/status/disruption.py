"""Pods the kubelet stops on its own (node-pressure eviction, graceful node
shutdown): what their status says (the PodStatusFunc upstream hands to
killPodNow), and the DisruptionTarget condition that tells controllers why."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet.status.conditions import DISRUPTION_TARGET
from kubelet.types import PodCondition, PodStatus
from kubelet.util.gotime import meta_now

TERMINATION_BY_KUBELET = "TerminationByKubelet"


@dataclass(frozen=True)
class KubeletTermination:
    reason: str
    message: str
    # Add DisruptionTarget (reason TerminationByKubelet, this message).
    disruption: bool = False


def _set_condition(status: PodStatus, ctype: str, value: str, reason: str, msg: str) -> None:
    """Replace the condition where it stands, else append it (UpdatePodCondition);
    its transition time moves only when its status does."""
    conditions: list[PodCondition] = list(status.get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == ctype), None)
    keep = old is not None and old.get("status") == value and old.get("lastTransitionTime")
    cond: PodCondition = {
        "type": ctype,
        "status": value,
        "lastProbeTime": None,
        "lastTransitionTime": (old.get("lastTransitionTime") or meta_now())
        if keep and old
        else meta_now(),
        "reason": reason,
    }
    if msg:
        cond["message"] = msg
    status["conditions"] = (
        [cond if c is old else c for c in conditions] if old is not None else [*conditions, cond]
    )


def apply(term: KubeletTermination, status: PodStatus) -> None:
    """The final status of a stopped pod: phase, reason, message, the
    condition, and Ready / ContainersReady false as a terminal pod's are.
    status: generated with terminal=True. Every container that exited 0 makes
    it Succeeded, and Succeeded it stays, without the kill's reason: upstream
    applies its PodStatusFunc before the kill only, and its final status keeps
    that reason only when the phase is still the Failed the function set
    (since 1.27, kubernetes issue 118310)."""
    if status.get("phase") != "Succeeded":
        status["phase"] = "Failed"
        status["reason"], status["message"] = term.reason, term.message
    if term.disruption:
        _set_condition(status, DISRUPTION_TARGET, "True", TERMINATION_BY_KUBELET, term.message)
    why = "PodCompleted" if status["phase"] == "Succeeded" else "PodFailed"
    for ctype in ("ContainersReady", "Ready"):
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)
        if cond is not None and cond.get("status") == "True":
            _set_condition(status, ctype, "False", why, "")
