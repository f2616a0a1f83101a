"""Build the API PodStatus from the runtime's view (kubelet_pods.go generateAPIPodStatus,
getPhase, and the status package's condition generators)."""

from __future__ import annotations

import datetime
from typing import Any

from kubelet.container.runtime import CREATED, EXITED, RUNNING, ContainerStatus, PodStatus
from kubelet.kuberuntime.termination import (
    MAX_POD_TERMINATION_MESSAGE_LENGTH,
    pod_message_budget,
    truncate_message,
)
from kubelet.types import Pod, host_network, qos_class, restart_policy


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
    return {"waiting": {"reason": "ContainerCreating"}}


def container_statuses(
    specs: list[dict[str, Any]],
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    init: bool,
    old: dict[str, dict[str, Any]],
    probes: Any = None,
    budget: int = MAX_POD_TERMINATION_MESSAGE_LENGTH,
) -> list[dict[str, Any]]:
    """budget: bytes of termination message each container's status may keep."""
    out = []
    for c in specs:
        cname = c["name"]
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
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
        }
        if cur is not None:
            entry["containerID"] = cur.container_id
            entry["imageID"] = cur.image_id
            entry["restartCount"] = cur.restart_count
            entry["state"] = _state(cur, budget)
            if cur.state == CREATED:
                entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
            entry["started"] = cur.state == RUNNING
            # Without probes, a running container is ready (init containers: when done).
            entry["ready"] = (
                (cur.state == RUNNING) if not init else (cur.state == EXITED and cur.exit_code == 0)
            )
            if probes is not None and not init and cur.state == RUNNING:
                entry["ready"] = probes.is_ready(c, cur.id)
                entry["started"] = probes.is_started(c, cur.id)
            if prev is not None and prev.state == EXITED:
                entry["lastState"] = _state(prev, budget)
        reason = waiting.get(cname)
        if reason and (cur is None or cur.state != RUNNING):
            # A container waiting to restart shows why, and the run before it.
            if cur is not None and cur.state == EXITED:
                entry["lastState"] = _state(cur, budget)
            w: dict[str, Any] = {"reason": reason[0]}
            if reason[1]:
                w["message"] = reason[1]
            entry["state"] = {"waiting": w}
            entry["started"] = False
        elif cur is None and cname in old:
            entry["restartCount"] = old[cname].get("restartCount", 0)
        out.append(entry)
    return out


def get_phase(pod: Pod, init_st: list[dict[str, Any]], st: list[dict[str, Any]]) -> str:
    policy = restart_policy(pod)
    init_failed = False
    pending_init = False
    for s in init_st:
        state = s["state"]
        if "terminated" in state and state["terminated"]["exitCode"] == 0:
            continue
        if "terminated" in state or ("waiting" in state and "terminated" in s.get("lastState", {})):
            # A failed init container fails the pod only when it cannot be retried.
            if policy == "Never":
                init_failed = True
        pending_init = True
    if init_failed:
        return "Failed"
    if pending_init:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for s in st:
        state = s["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"]["exitCode"] == 0
        elif "waiting" in state:
            if "terminated" in s.get("lastState", {}):
                stopped += 1
            else:
                waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"  # they will be restarted
        if policy == "OnFailure":
            return "Succeeded" if stopped == succeeded else "Running"
        return "Succeeded" if stopped == succeeded else "Failed"
    return "Pending"


def generate(
    pod: Pod,
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    node_ips: list[str],
    old: dict[str, Any] | None,
    probes: Any = None,
) -> dict[str, Any]:
    old = old or {}
    spec = pod["spec"]
    old_c = {c["name"]: c for c in old.get("containerStatuses", [])}
    old_i = {c["name"]: c for c in old.get("initContainerStatuses", [])}
    budget = pod_message_budget(pod)
    init_st = container_statuses(
        spec.get("initContainers") or [], status, waiting, True, old_i, budget=budget
    )
    st = container_statuses(spec["containers"], status, waiting, False, old_c, probes, budget)
    if init_st and any(not s["ready"] for s in init_st):
        for s in st:
            if "waiting" in s["state"] and s["state"]["waiting"]["reason"] == "ContainerCreating":
                s["state"] = {"waiting": {"reason": "PodInitializing"}}
    phase = get_phase(pod, init_st, st)
    # Terminal is terminal: a pod never leaves Succeeded or Failed.
    if old.get("phase") in ("Succeeded", "Failed"):
        phase = old["phase"]
    sandbox_ready = bool(status.sandboxes and status.sandboxes[0].ready)
    initialized = all(s["ready"] for s in init_st)
    containers_ready = all(s["ready"] for s in st) and phase == "Running"
    prev_conds = {c["type"]: c for c in old.get("conditions", [])}

    def cond(ctype: str, ok: bool, reason: str = "") -> dict[str, Any]:
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
        if reason and not ok:
            c["reason"] = reason
        return c

    not_ready = [s["name"] for s in st if not s["ready"]]
    reason_cr = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
    conditions = [
        cond("PodReadyToStartContainers", sandbox_ready),
        cond("Initialized", initialized, "ContainersNotInitialized"),
        cond("Ready", containers_ready, reason_cr),
        cond("ContainersReady", containers_ready, reason_cr),
        cond("PodScheduled", True),
    ]
    if not containers_ready and phase not in ("Succeeded", "Failed") and not_ready:
        for c in conditions[2:4]:
            c["message"] = f"containers with unready status: [{' '.join(not_ready)}]"
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
    ips = node_ips if host_network(pod) else status.ips
    if ips:
        out["podIP"] = ips[0]
        out["podIPs"] = [{"ip": ip} for ip in ips]
    elif old.get("podIP"):
        out["podIP"], out["podIPs"] = old["podIP"], old.get("podIPs", [])
    return out
