"""Build the API PodStatus from the runtime's view (kubelet_pods.go generateAPIPodStatus,
getPhase, and the status package's condition generators)."""

from __future__ import annotations

import datetime
from typing import Any

from kubelet.container.runtime import EXITED, RUNNING, ContainerStatus, PodStatus
from kubelet.kuberuntime.termination import (
    MAX_POD_TERMINATION_MESSAGE_LENGTH,
    pod_message_budget,
    truncate_message,
)
from kubelet.status.generation import condition_observed_generation, generation
from kubelet.types import Pod, host_network, is_static, qos_class, restart_policy

# Pod conditions the kubelet owns; the others (readiness gates' conditions,
# DisruptionTarget, anything a controller adds) are kept as the API has them.
KUBELET_CONDITIONS = frozenset(
    {
        "PodScheduled",
        "Ready",
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
        "PodResizeInProgress",
        "PodResizePending",
    }
)
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"
# Set once by whoever disrupts the pod (eviction, shutdown, preemption) and
# carried from the kubelet's previous status, never regenerated.
DISRUPTION_TARGET = "DisruptionTarget"


def readiness_gates_unready(pod: Pod, conditions: list[dict[str, Any]]) -> list[str]:
    """Why the pod's readiness gates hold it unready (one message per gate,
    upstream's wording), given the pod's current conditions."""
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return []
    by_type = {c.get("type"): c for c in conditions}
    out = []
    for g in gates:
        t = g.get("conditionType", "")
        c = by_type.get(t)
        if c is None:
            out.append(f'corresponding condition of pod readiness gate "{t}" does not exist.')
        elif c.get("status") != "True":
            out.append(
                f'the status of pod readiness gate "{t}" is not "True", but {c.get("status")}'
            )
    return out


def need_to_reconcile_pod_readiness(pod: Pod) -> bool:
    """A pod with readiness gates whose API Ready condition no longer says what
    the gates and its containers say (NeedToReconcilePodReadiness): someone set
    a gate's condition, and the kubelet must write Ready again."""
    if not (pod.get("spec") or {}).get("readinessGates"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    by_type = {c.get("type"): c for c in conditions}
    ready = by_type.get("Ready")
    if ready is None:
        return False
    containers = by_type.get("ContainersReady") or {}
    if containers.get("status") != "True":
        want = (containers.get("status"), containers.get("message"))
    else:
        gates = readiness_gates_unready(pod, conditions)
        want = ("False", ", ".join(gates)) if gates else ("True", None)
    return (ready.get("status"), ready.get("message")) != want


def ts(ns: int) -> str | None:
    if not ns:
        return None
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _state(cs: ContainerStatus, budget: int = MAX_POD_TERMINATION_MESSAGE_LENGTH) -> dict[str, Any]:
    if cs.state == RUNNING:
        return {"running": {"startedAt": ts(cs.started_at)}}
    if cs.state == EXITED:
        t: dict[str, Any] = {
            "exitCode": cs.exit_code,
            "reason": cs.reason or ("Completed" if cs.exit_code == 0 else "Error"),
            "startedAt": ts(cs.started_at),
            "finishedAt": ts(cs.finished_at),
            "containerID": cs.container_id,
        }
        if cs.message:
            t["message"] = truncate_message(cs.message, budget)
        return {"terminated": t}
    # Created but not started (or unknown): "waiting to be running", no reason.
    return {"waiting": {}}


def is_sidecar(c: dict[str, Any]) -> bool:
    """An init container with restartPolicy Always (a restartable init container)."""
    return c.get("restartPolicy") == "Always"


def container_statuses(
    specs: list[dict[str, Any]],
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    init: bool,
    old: dict[str, dict[str, Any]],
    probes: Any = None,
    budget: int = MAX_POD_TERMINATION_MESSAGE_LENGTH,
    has_init: bool = False,
    ephemeral: bool = False,
) -> list[dict[str, Any]]:
    """convertToAPIContainerStatuses plus the prober's started/ready.
    budget: bytes of termination message each container's status may keep;
    has_init: the pod has init containers (containers not created yet then
    wait with PodInitializing rather than ContainerCreating, as upstream)."""
    default_reason = "PodInitializing" if has_init else "ContainerCreating"
    out = []
    for c in specs:
        cname = c["name"]
        sidecar = init and is_sidecar(c)
        instances = status.all_named(cname)
        cur = instances[0] if instances else None
        prev = instances[1] if len(instances) > 1 else None
        entry: dict[str, Any] = {
            "name": cname,
            "image": c["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": default_reason}},
            "lastState": {},
        }
        before = old.get(cname)
        if cur is None and before is not None:
            if "terminated" in (before.get("state") or {}):
                entry = dict(before)  # gone from the runtime: its end stays known
            else:
                entry["restartCount"] = before.get("restartCount", 0)
                entry["lastState"] = before.get("lastState") or {}
        if cur is not None:
            entry["containerID"] = cur.container_id
            entry["imageID"] = cur.image_id
            entry["restartCount"] = cur.restart_count
            entry["state"] = _state(cur, budget)
            if prev is not None and prev.state == EXITED:
                entry["lastState"] = _state(prev, budget)
        running = cur is not None and cur.state == RUNNING
        # Started: running, and its startup probe (if any) succeeded. Ready:
        # started and its readiness probe (if any) succeeded; a regular init
        # container is ready once it exited 0.
        started = ready = False
        if cur is not None and running:
            started = probes is None or probes.is_started(c, cur.id)
            ready = started and (probes is None or probes.is_ready(c, cur.id))
        if init and not sidecar:
            term = entry["state"].get("terminated")
            ready = bool(term) and term.get("exitCode") == 0
        entry["ready"] = ready
        entry["started"] = started
        reason = waiting.get(cname)
        done_init = (
            init and not sidecar and cur is not None and cur.state == EXITED and cur.exit_code == 0
        )
        if reason and not running and not done_init:
            # A container waiting to (re)start shows why, and the run before it.
            if cur is not None and cur.state == EXITED:
                entry["lastState"] = _state(cur, budget)
            w: dict[str, Any] = {"reason": reason[0]}
            if reason[1]:
                w["message"] = reason[1]
            entry["state"] = {"waiting": w}
            entry["ready"] = entry["started"] = False
        if ephemeral:
            # Not probed, not part of readiness: upstream leaves `started` unset.
            entry.pop("started", None)
            entry["ready"] = False
        out.append(entry)
    return out


def get_phase(
    pod: Pod,
    init_st: list[dict[str, Any]],
    st: list[dict[str, Any]],
    initialized: bool = False,
    terminal: bool = False,
) -> str:
    """getPhase: regular init containers gate the pod; sidecars only while the
    pod has not initialized and never count towards its completion.
    initialized: a regular container has run in the current sandbox."""
    policy = restart_policy(pod)
    sidecars = {c["name"] for c in pod["spec"].get("initContainers") or [] if is_sidecar(c)}
    pending_init = pending_sidecars = failed_init = 0
    running = waiting = stopped = succeeded = 0
    for s in init_st:
        state = s["state"]
        last = s.get("lastState") or {}
        if s.get("name") in sidecars:
            if "running" in state:
                if not s.get("started"):
                    pending_sidecars += 1
                running += 1
            elif "waiting" in state and "terminated" not in last:
                pending_sidecars += 1
                waiting += 1
            continue  # a stopped sidecar is ignored
        if "running" in state:
            pending_init += 1
        elif "terminated" in state:
            failed_init += state["terminated"]["exitCode"] != 0
        elif "waiting" in state and "terminated" in last:
            failed_init += last["terminated"]["exitCode"] != 0
        else:
            pending_init += 1
    for s in st:
        state = s["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"]["exitCode"] == 0
        elif "waiting" in state:
            if "terminated" in (s.get("lastState") or {}):
                stopped += 1
            else:
                waiting += 1
    if failed_init and policy == "Never":
        return "Failed"
    if pending_init or (pending_sidecars and not initialized) or waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if policy == "Always":
            return "Running"  # they will be restarted
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if policy == "Never" else "Running"
    return "Pending"


def _foreign_conditions(
    api_conditions: list[dict[str, Any]], disruption: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The conditions others own, as the API has them, with the DisruptionTarget
    the kubelet set itself (on eviction) taken from its own previous status: the
    API copy may not carry it yet."""
    out = [c for c in api_conditions if c.get("type") not in KUBELET_CONDITIONS]
    if disruption is None:
        return out
    at = next((i for i, c in enumerate(out) if c.get("type") == DISRUPTION_TARGET), None)
    if at is None:
        return [*out, disruption]
    out[at] = disruption
    return out


UNKNOWN_TERMINATION = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}


def _has_initialized(pod: Pod, status: dict[str, Any]) -> bool:
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


def _tried(c: dict[str, Any]) -> bool:
    return "waiting" not in c.get("state", {}) or "terminated" in (c.get("lastState") or {})


def terminate_pod(pod: Pod, status: dict[str, Any]) -> dict[str, Any]:
    """TerminatePod: the status a pod ends with once its containers are stopped.
    Once it has initialized, a regular container with no final state ended
    unknown (137); so did every init container up to the last one that tried
    to start (at least the first); regular containers of a pod that never
    initialized keep waiting. A pod that is not static and not yet Succeeded
    or Failed is Failed."""
    out = dict(status)

    def unknown(c: dict[str, Any]) -> dict[str, Any]:
        if "terminated" in c.get("state", {}):
            return c
        return {**c, "state": {"terminated": dict(UNKNOWN_TERMINATION)}}

    if _has_initialized(pod, status):
        out["containerStatuses"] = [unknown(c) for c in status.get("containerStatuses") or []]
    inits = list(status.get("initContainerStatuses") or [])
    if inits:
        tried = max((i for i, c in enumerate(inits) if _tried(c)), default=0)
        out["initContainerStatuses"] = [
            unknown(c) if i <= tried else c for i, c in enumerate(inits)
        ]
    if not is_static(pod) and out.get("phase") not in ("Succeeded", "Failed"):
        out["phase"] = "Failed"
    return out


def failed_status(
    old: dict[str, Any],
    pod: Pod,
    reason: str,
    message: str,
    condition: dict[str, Any] | None = None,
    tracking: bool = True,
) -> dict[str, Any]:
    """The status a kill by the kubelet leaves (killPodFunc's status function):
    Failed with reason and message, plus a condition such as DisruptionTarget,
    which takes the place of one of its type (keeping its transition time when
    its status is the same)."""
    out = {**old, "phase": "Failed", "reason": reason, "message": message}
    if condition is None:
        return out
    conditions = list(old.get("conditions") or [])
    at = next((i for i, c in enumerate(conditions) if c.get("type") == condition["type"]), None)
    before = conditions[at] if at is not None else None
    c = {"lastProbeTime": None, **condition}
    c["lastTransitionTime"] = (
        before["lastTransitionTime"]
        if before and before.get("status") == c["status"] and before.get("lastTransitionTime")
        else now()
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


def _any_regular_active(pod: Pod, status: PodStatus) -> bool:
    """A regular container runs or ran (HasAnyActiveRegularContainerStarted)."""
    return any(
        c.state in (RUNNING, EXITED)
        for s in pod["spec"]["containers"]
        for c in status.all_named(s["name"])
    )


def generate(
    pod: Pod,
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    node_ips: list[str],
    old: dict[str, Any] | None,
    probes: Any = None,
    tracking: bool = True,
) -> dict[str, Any]:
    """generateAPIPodStatus. tracking: PodObservedGenerationTracking is on (each
    kubelet condition then reports the pod generation the status was made from)."""
    old = old or {}
    spec = pod["spec"]
    init_specs = spec.get("initContainers") or []
    has_init = bool(init_specs)
    old_c = {c["name"]: c for c in old.get("containerStatuses", [])}
    old_i = {c["name"]: c for c in old.get("initContainerStatuses", [])}
    old_e = {c["name"]: c for c in old.get("ephemeralContainerStatuses", [])}
    budget = pod_message_budget(pod)
    init_st = container_statuses(init_specs, status, waiting, True, old_i, probes, budget, has_init)
    st = container_statuses(
        spec["containers"], status, waiting, False, old_c, probes, budget, has_init
    )
    eph_specs = spec.get("ephemeralContainers") or []
    eph_st = container_statuses(
        eph_specs, status, waiting, False, old_e, None, budget, has_init, ephemeral=True
    )
    phase = get_phase(pod, init_st, st, _any_regular_active(pod, status))
    # Terminal is terminal: a pod never leaves Succeeded or Failed.
    if old.get("phase") in ("Succeeded", "Failed"):
        phase = old["phase"]
    sandbox_ready = bool(status.sandboxes and status.sandboxes[0].ready)
    old_conditions = old.get("conditions") or []
    prev_conds = {c["type"]: c for c in old_conditions}
    gen = generation(pod)

    def cond(ctype: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
        status_s = "True" if ok else "False"
        before = prev_conds.get(ctype)
        c: dict[str, Any] = {
            "type": ctype,
            "status": status_s,
            "lastProbeTime": None,
            "lastTransitionTime": before["lastTransitionTime"]
            if before and before["status"] == status_s
            else now(),
        }
        observed = condition_observed_generation(old_conditions, gen, ctype, tracking)
        if observed:
            c["observedGeneration"] = observed
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        return c

    # Initialized (GeneratePodInitializedCondition): regular init containers
    # ready, sidecars started; true for good once a regular container ran.
    incomplete = [
        s["name"]
        for s, c in zip(init_st, init_specs, strict=True)
        if not (s["started"] if is_sidecar(c) else s["ready"])
    ]
    regular_started = any("running" in s["state"] or "terminated" in s["state"] for s in st)
    if phase == "Succeeded":
        initialized = cond("Initialized", True, "PodCompleted")
    elif regular_started or not incomplete:
        initialized = cond("Initialized", True)
    else:
        initialized = cond(
            "Initialized",
            False,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(incomplete)}]",
        )
    # ContainersReady and Ready: sidecars and regular containers, never
    # ephemeral ones; a finished pod is not ready.
    unready = [
        s["name"]
        for s, c in zip(init_st, init_specs, strict=True)
        if is_sidecar(c) and not s["ready"]
    ] + [s["name"] for s in st if not s["ready"]]
    if phase in ("Succeeded", "Failed"):
        why = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        ready_args: tuple[bool, str, str] = (False, why, "")
    elif unready:
        ready_args = (
            False,
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(unready)}]",
        )
    else:
        ready_args = (True, "", "")
    # The API's copy of the pod carries the conditions others own.
    api_conditions = (pod.get("status") or {}).get("conditions") or []
    foreign = _foreign_conditions(api_conditions, prev_conds.get(DISRUPTION_TARGET))
    ready_cond = cond("Ready", *ready_args)
    if ready_args[0]:
        gates = readiness_gates_unready(pod, api_conditions)
        if gates:
            ready_cond = cond("Ready", False, READINESS_GATES_NOT_READY, ", ".join(gates))
    conditions = [
        *foreign,
        cond("PodReadyToStartContainers", sandbox_ready),
        initialized,
        ready_cond,
        cond("ContainersReady", *ready_args),
        cond("PodScheduled", True),
    ]
    out: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": node_ips[0] if node_ips else None,
        "hostIPs": [{"ip": ip} for ip in node_ips],
        "startTime": old.get("startTime") or now(),
        "qosClass": qos_class(pod),
        "containerStatuses": st,
    }
    if init_st:
        out["initContainerStatuses"] = init_st
    if eph_st:
        out["ephemeralContainerStatuses"] = eph_st
    ips = node_ips if host_network(pod) else status.ips
    if ips:
        out["podIP"] = ips[0]
        out["podIPs"] = [{"ip": ip} for ip in ips]
    elif old.get("podIP"):
        out["podIP"], out["podIPs"] = old["podIP"], old.get("podIPs", [])
    return out
