"""Build the API PodStatus from the runtime's view (kubelet_pods.go generateAPIPodStatus,
getPhase, and the status package's condition generators)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from kubelet import types as v1
from kubelet.container.mounts import resolve_recursive_read_only
from kubelet.container.runtime import EXITED, RUNNING, ContainerStatus, ContainerUser, PodStatus
from kubelet.kuberuntime.pod_actions import sandbox_changed
from kubelet.kuberuntime.termination import (
    MAX_POD_TERMINATION_MESSAGE_LENGTH,
    pod_message_budget,
    truncate_message,
)
from kubelet.status.conditions import (
    DISRUPTION_TARGET,
    Conditions,
    foreign_conditions,
    initialized,
    readiness,
    ready_condition,
)
from kubelet.status.generation import generation
from kubelet.types import (
    TERMINAL_PHASES,
    Container,
    Pod,
    all_containers,
    host_network,
    is_sidecar,
    is_static,
    qos_class,
    restart_policy,
)
from kubelet.util.gotime import meta_now, meta_time_ns

# (pod, container name) -> the health of the devices the container holds
# (device plugins' and DRA claims', with ResourceHealthStatus on).
ResourceHealth = Callable[[Pod, str], list[v1.ResourceStatus]]

log = logging.getLogger(__name__)


class ProbeResults(Protocol):
    """What the prober says of a running container (prober.ProbeManager)."""

    def is_started(self, container: Container, cid: str) -> bool: ...

    def is_ready(self, container: Container, cid: str) -> bool: ...


def _state(
    cs: ContainerStatus, budget: int = MAX_POD_TERMINATION_MESSAGE_LENGTH
) -> v1.ContainerState:
    if cs.state == RUNNING:
        return {"running": {"startedAt": meta_time_ns(cs.started_at)}}
    if cs.state == EXITED:
        t: v1.ContainerStateTerminated = {
            "exitCode": cs.exit_code,
            "reason": cs.reason or ("Completed" if cs.exit_code == 0 else "Error"),
            "startedAt": meta_time_ns(cs.started_at),
            "finishedAt": meta_time_ns(cs.finished_at),
            "containerID": cs.container_id,
        }
        if cs.message:
            t["message"] = truncate_message(cs.message, budget)
        return {"terminated": t}
    # Created but not started (or unknown): "waiting to be running", no reason.
    return {"waiting": {}}


def _runtime_entry(
    c: Container,
    instances: list[ContainerStatus],
    before: v1.ContainerStatus | None,
    default_reason: str,
    budget: int,
) -> v1.ContainerStatus:
    """A container's status from its two newest runtime instances, or from its
    previous status when the runtime has none (yet, or any more)."""
    cur = instances[0] if instances else None
    prev = instances[1] if len(instances) > 1 else None
    entry: v1.ContainerStatus = {
        "name": c["name"],
        "image": c["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": default_reason}},
        "lastState": {},
    }
    if cur is None and before is not None:
        if "terminated" in (before.get("state") or {}):
            return before.copy()  # gone from the runtime: its end stays known
        entry["restartCount"] = before.get("restartCount", 0)
        entry["lastState"] = before.get("lastState") or {}
    if cur is not None:
        entry["containerID"] = cur.container_id
        # The image the instance runs (a spec changed since it started is not it).
        entry["image"] = cur.image or c["image"]
        entry["imageID"] = cur.image_id
        entry["restartCount"] = cur.restart_count
        entry["state"] = _state(cur, budget)
        if prev is not None and prev.state == EXITED:
            entry["lastState"] = _state(prev, budget)
        if cur.user is not None:
            entry["user"] = api_user(cur.user)
    return entry


def api_user(user: ContainerUser) -> v1.ContainerUser:
    """convertContainerStatusUser (supplementalGroups left out when empty)."""
    out: v1.ContainerUser = {}
    if user.linux is not None:
        u = user.linux
        linux: v1.LinuxContainerUser = {"uid": u.uid, "gid": u.gid}
        if u.supplemental_groups:
            linux["supplementalGroups"] = list(u.supplemental_groups)
        out["linux"] = linux
    return out


def _started_ready(
    c: Container,
    cur: ContainerStatus | None,
    entry: v1.ContainerStatus,
    probes: ProbeResults | None,
    regular_init: bool,
) -> tuple[bool, bool]:
    """Started: running, and its startup probe (if any) succeeded. Ready:
    started and its readiness probe (if any) succeeded; a regular init
    container is ready once it exited 0."""
    started = ready = False
    if cur is not None and cur.state == RUNNING:
        started = probes is None or probes.is_started(c, cur.id)
        ready = started and (probes is None or probes.is_ready(c, cur.id))
    if regular_init:
        term = entry["state"].get("terminated")
        ready = term is not None and term.get("exitCode") == 0
    return started, ready


def _show_waiting(
    entry: v1.ContainerStatus, cur: ContainerStatus | None, reason: tuple[str, str], budget: int
) -> None:
    """A container waiting to (re)start shows why, and the run before it."""
    if cur is not None and cur.state == EXITED:
        entry["lastState"] = _state(cur, budget)
    w: v1.ContainerStateWaiting = {"reason": reason[0]}
    if reason[1]:
        w["message"] = reason[1]
    entry["state"] = {"waiting": w}
    entry["ready"] = entry["started"] = False


def container_statuses(
    specs: Sequence[Container],
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    init: bool,
    old: dict[str, v1.ContainerStatus],
    probes: ProbeResults | None = None,
    budget: int = MAX_POD_TERMINATION_MESSAGE_LENGTH,
    has_init: bool = False,
    ephemeral: bool = False,
) -> list[v1.ContainerStatus]:
    """convertToAPIContainerStatuses plus the prober's started/ready.
    budget: bytes of termination message each container's status may keep;
    has_init: the pod has init containers (containers not created yet then
    wait with PodInitializing rather than ContainerCreating, as upstream)."""
    default_reason = "PodInitializing" if has_init else "ContainerCreating"
    out = []
    for c in specs:
        cname = c["name"]
        regular_init = init and not is_sidecar(c)
        instances = status.all_named(cname)
        cur = instances[0] if instances else None
        entry = _runtime_entry(c, instances, old.get(cname), default_reason, budget)
        entry["started"], entry["ready"] = _started_ready(c, cur, entry, probes, regular_init)
        reason = waiting.get(cname)
        running = cur is not None and cur.state == RUNNING
        done_init = regular_init and cur is not None and cur.state == EXITED and cur.exit_code == 0
        if reason and not running and not done_init:
            _show_waiting(entry, cur, reason, budget)
        if ephemeral:
            # Not probed, not part of readiness: upstream leaves `started` unset.
            entry.pop("started", None)
            entry["ready"] = False
        out.append(entry)
    return out


def _count_init(
    init_st: list[v1.ContainerStatus], sidecars: set[str]
) -> tuple[int, int, int, int, int]:
    """getPhase's init container counts: (pending regular, pending sidecars,
    failed regular, running sidecars, waiting sidecars)."""
    pending_init = pending_sidecars = failed_init = running = waiting = 0
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
    return pending_init, pending_sidecars, failed_init, running, waiting


def get_phase(
    pod: Pod,
    init_st: list[v1.ContainerStatus],
    st: list[v1.ContainerStatus],
    initialized: bool = False,
    terminal: bool = False,
) -> str:
    """getPhase: regular init containers gate the pod; sidecars only while the
    pod has not initialized and never count towards its completion.
    initialized: a regular container has run in the current sandbox."""
    policy = restart_policy(pod)
    sidecars = {c["name"] for c in pod["spec"].get("initContainers") or [] if is_sidecar(c)}
    pending_init, pending_sidecars, failed_init, running, waiting = _count_init(init_st, sidecars)
    stopped = succeeded = 0
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
        # Stopped for good (deleted, evicted): Succeeded when every one exited 0,
        # whatever the restart policy; static pods are left out, as upstream.
        if terminal and not is_static(pod):
            return "Succeeded" if stopped == succeeded else "Failed"
        if policy == "Always":
            return "Running"  # they will be restarted
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if policy == "Never" else "Running"
    return "Pending"


def _any_regular_active(pod: Pod, status: PodStatus) -> bool:
    """A regular container runs or ran (HasAnyActiveRegularContainerStarted)."""
    return any(
        c.state in (RUNNING, EXITED)
        for s in pod["spec"]["containers"]
        for c in status.all_named(s["name"])
    )


def asks_recursive_read_only(pod: Pod) -> bool:
    """Whether any container of the pod names a recursiveReadOnly mode: only
    then does its status depend on the runtime handler (asked per sync, so
    skipped for every other pod)."""
    return any(
        m.get("recursiveReadOnly") for c in all_containers(pod) for m in c.get("volumeMounts") or []
    )


def _volume_mounts(c: Container, rro_supported: bool) -> list[v1.VolumeMountStatus]:
    """The container's volumeMounts as its status reports them (RecursiveReadOnlyMounts):
    a read-only mount says whether it was made recursively read-only."""
    out: list[v1.VolumeMountStatus] = []
    for vm in c.get("volumeMounts") or []:
        m: v1.VolumeMountStatus = {"name": vm.get("name", ""), "mountPath": vm.get("mountPath", "")}
        if vm.get("readOnly"):
            m["readOnly"] = True
            try:
                rro = resolve_recursive_read_only(vm, rro_supported)
            except ValueError as err:  # the container cannot start; the status says Disabled
                log.error("failed to resolve recursive read-only mode: %s", err)
                rro = False
            m["recursiveReadOnly"] = "Enabled" if rro else "Disabled"
        out.append(m)
    return out


def _set_volume_mounts(
    specs: Sequence[Container],
    statuses: list[v1.ContainerStatus],
    old: dict[str, v1.ContainerStatus],
    rro_supported: bool,
) -> None:
    """Each status's volumeMounts: from its previous status (immutable, as
    upstream carries them), else from the spec."""
    by_name = {c["name"]: c for c in specs}
    for cs in statuses:
        prev = old.get(cs["name"])
        mounts = prev.get("volumeMounts") if prev is not None else None
        spec = by_name.get(cs["name"])
        if not mounts and spec is not None:
            mounts = _volume_mounts(spec, rro_supported)
        if mounts:
            cs["volumeMounts"] = mounts


def _all_statuses(
    pod: Pod,
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    old: v1.PodStatus,
    probes: ProbeResults | None,
    rro_supported: bool = False,
) -> tuple[list[v1.ContainerStatus], list[v1.ContainerStatus], list[v1.ContainerStatus]]:
    """The init, regular and ephemeral container statuses of the pod.
    rro_supported: the pod's runtime handler makes recursive read-only mounts."""
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
    for specs, statuses, before in (
        (init_specs, init_st, old_i), (spec["containers"], st, old_c), (eph_specs, eph_st, old_e),
    ):  # fmt: skip
        _set_volume_mounts(specs, statuses, before, rro_supported)
    return init_st, st, eph_st


def _set_pod_ips(
    out: v1.PodStatus, pod: Pod, status: PodStatus, node_ips: list[str], old: v1.PodStatus
) -> None:
    """podIP(s): the node's for a host-network pod, else the sandbox's, else
    what the previous status had (a sandbox being recreated has none)."""
    ips = node_ips if host_network(pod) else status.ips
    if ips:
        out["podIP"] = ips[0]
        out["podIPs"] = [{"ip": ip} for ip in ips]
    elif old_ip := old.get("podIP"):
        out["podIP"], out["podIPs"] = old_ip, old.get("podIPs", [])


def _settled_phase(pod: Pod, computed: str, old: v1.PodStatus) -> str:
    """Terminal is terminal, as upstream rules it: a phase computed from the
    containers that is not terminal takes the kubelet's own terminal phase
    (or the API's); a terminal one stands (a preempted pod whose containers
    exited 0 is Succeeded, not the kill's Failed) unless the API already
    holds a terminal phase, which no pod ever leaves."""
    api_phase = (pod.get("status") or {}).get("phase")
    if api_phase in TERMINAL_PHASES:
        return str(api_phase)
    if computed not in TERMINAL_PHASES and old.get("phase") in TERMINAL_PHASES:
        return str(old["phase"])
    return computed


def generate(
    pod: Pod,
    status: PodStatus,
    waiting: dict[str, tuple[str, str]],
    node_ips: list[str],
    old: v1.PodStatus | None,
    probes: ProbeResults | None = None,
    tracking: bool = True,
    resource_health: ResourceHealth | None = None,
    terminal: bool = False,
    ready_to_start: bool = True,
    rro_supported: bool = False,
) -> v1.PodStatus:
    """generateAPIPodStatus. tracking: PodObservedGenerationTracking is on (each
    kubelet condition then reports the pod generation the status was made from).
    resource_health: ResourceHealthStatus is on; regular containers holding
    devices get allocatedResourcesStatus (as upstream, not init containers).
    terminal: the pod's containers were stopped for good (podIsTerminal).
    ready_to_start: PodReadyToStartContainersCondition is on.
    rro_supported: the pod's runtime handler makes recursive read-only mounts."""
    old = old or {}
    init_specs = pod["spec"].get("initContainers") or []
    init_st, st, eph_st = _all_statuses(pod, status, waiting, old, probes, rro_supported)
    if resource_health is not None:
        for cs in st:
            if health := resource_health(pod, cs["name"]):
                cs["allocatedResourcesStatus"] = health
    computed = get_phase(pod, init_st, st, _any_regular_active(pod, status), terminal)
    phase = _settled_phase(pod, computed, old)
    cond = Conditions.of(old.get("conditions") or [], generation(pod), tracking)
    ready_args = readiness(phase, init_specs, init_st, st)
    # The API's copy of the pod carries the conditions others own.
    api_conditions = (pod.get("status") or {}).get("conditions") or []
    foreign = foreign_conditions(api_conditions, cond.by_type.get(DISRUPTION_TARGET))
    # True once a sandbox with its network is up, one the runtime manager would
    # keep (no new sandbox needed), as upstream's PodSandboxChanged decides.
    sandbox = [cond.make("PodReadyToStartContainers", not sandbox_changed(pod, status)[0])]
    conditions = [
        *foreign,
        *(sandbox if ready_to_start else []),
        initialized(cond, phase, init_specs, init_st, st),
        ready_condition(cond, pod, api_conditions, ready_args),
        cond.make("ContainersReady", *ready_args),
        cond.make("PodScheduled", True),
    ]
    out: v1.PodStatus = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": node_ips[0] if node_ips else None,
        "hostIPs": [{"ip": ip} for ip in node_ips],
        "startTime": old.get("startTime") or meta_now(),
        "qosClass": qos_class(pod),
        "containerStatuses": st,
    }
    if init_st:
        out["initContainerStatuses"] = init_st
    if eph_st:
        out["ephemeralContainerStatuses"] = eph_st
    _set_pod_ips(out, pod, status, node_ips, old)
    return out
