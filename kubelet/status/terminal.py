"""The status a pod ends with: once its containers are stopped (TerminatePod)
and when the kubelet kills it (killPodFunc's status function)."""

from __future__ import annotations

from kubelet import types as v1
from kubelet.status.generation import condition_observed_generation, generation
from kubelet.types import TERMINAL_PHASES, Pod, is_sidecar, is_static
from kubelet.util.gotime import meta_now

UNKNOWN_TERMINATION: v1.ContainerStateTerminated = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}


def _has_initialized(pod: Pod, status: v1.PodStatus) -> bool:
    """hasPodInitialized: a regular container ever left Waiting, or the last init
    container completed (a sidecar: started)."""
    init_specs = pod["spec"].get("initContainers") or []
    if not init_specs:
        return True
    for c in status.get("containerStatuses") or []:
        if "terminated" in (c.get("lastState") or {}) or "waiting" not in c.get("state", {}):
            return True
    inits = status.get("initContainerStatuses") or []
    if not inits or len(inits) > len(init_specs):
        return False
    last, spec = inits[-1], init_specs[len(inits) - 1]
    if is_sidecar(spec):
        return "running" in last.get("state", {}) and bool(last.get("started"))
    ends = [
        (last.get("lastState") or {}).get("terminated"),
        last.get("state", {}).get("terminated"),
    ]
    return any(t is not None and t.get("exitCode") == 0 for t in ends)


def _tried(c: v1.ContainerStatus) -> bool:
    return "waiting" not in c.get("state", {}) or "terminated" in (c.get("lastState") or {})


def terminate_pod(pod: Pod, status: v1.PodStatus) -> v1.PodStatus:
    """TerminatePod: the status a pod ends with once its containers are stopped.
    Once it has initialized, a regular container with no final state ended
    unknown (137); so did every init container up to the last one that tried
    to start (at least the first); regular containers of a pod that never
    initialized keep waiting. A pod that is not static and not yet Succeeded
    or Failed is Failed."""
    out = status.copy()

    def unknown(c: v1.ContainerStatus) -> v1.ContainerStatus:
        if "terminated" in c.get("state", {}):
            return c
        ended = c.copy()
        ended["state"] = {"terminated": UNKNOWN_TERMINATION.copy()}
        return ended

    if _has_initialized(pod, status):
        out["containerStatuses"] = [unknown(c) for c in status.get("containerStatuses") or []]
    inits = list(status.get("initContainerStatuses") or [])
    if inits:
        tried = max((i for i, c in enumerate(inits) if _tried(c)), default=0)
        out["initContainerStatuses"] = [
            unknown(c) if i <= tried else c for i, c in enumerate(inits)
        ]
    if not is_static(pod) and out.get("phase") not in TERMINAL_PHASES:
        out["phase"] = "Failed"
    return out


def failed_status(
    old: v1.PodStatus,
    pod: Pod,
    reason: str,
    message: str,
    condition: v1.PodCondition | None = None,
    tracking: bool = True,
) -> v1.PodStatus:
    """The status a kill by the kubelet leaves (killPodFunc's status function):
    Failed with reason and message, plus a condition such as DisruptionTarget,
    which takes the place of one of its type (keeping its transition time when
    its status is the same)."""
    out = old.copy()
    out["phase"], out["reason"], out["message"] = "Failed", reason, message
    if condition is None:
        return out
    conditions = list(old.get("conditions") or [])
    at = next((i for i, c in enumerate(conditions) if c.get("type") == condition["type"]), None)
    before = conditions[at] if at is not None else None
    c: v1.PodCondition = {"lastProbeTime": None, **condition}
    c["lastTransitionTime"] = (
        before["lastTransitionTime"]
        if before and before.get("status") == c["status"] and before.get("lastTransitionTime")
        else meta_now()
    )
    gen = condition_observed_generation(conditions, generation(pod), c["type"], tracking)
    if gen:
        c["observedGeneration"] = gen
    if at is None:
        conditions.append(c)
    else:
        conditions[at] = c
    out["conditions"] = conditions
    return out
