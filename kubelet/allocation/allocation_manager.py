"""What the kubelet allocated to each pod, and in-place resizes of it
(pkg/kubelet/allocation, KEP 1287).

The desired resources are the pod's spec; the allocated ones are those the
kubelet admitted (or accepted in a resize) and runs the pod with; the
actuated ones are those it last set on each running container. Allocated and
actuated survive a restart in checkpoints under the root dir. The decisions
(feasible, deferred, in progress) are pure functions; AllocationManager keeps
the state and the resize conditions.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from kubelet import metrics
from kubelet.allocation.state import (
    ACTUATED_FILE,
    ALLOCATED_FILE,
    AllocationState,
    PodResources,
    Requirements,
    as_api,
    normalize,
    resources_of,
)
from kubelet.checkpointmanager import CheckpointStore
from kubelet.lifecycle.predicate import Rejection, pod_requests
from kubelet.status.generation import generation
from kubelet.status.resize_conditions import DEFERRED, INFEASIBLE, ResizeConditions
from kubelet.types import Container, Pod, is_static, qos_class, uid
from kubelet.util.quantity import cpu_millis, to_bytes

log = logging.getLogger(__name__)

# The spec's container lists that carry resources a resize can change.
CONTAINER_LISTS: tuple[Literal["containers", "initContainers"], ...] = (
    "containers",
    "initContainers",
)

STATIC_POD_MESSAGE = "In-place resize of static-pods is not supported"
SWAP_MESSAGE = "In-place resize of containers with swap is not supported."
# The API server's wording for what it refuses (ValidatePodResize).
POD_LEVEL_MESSAGE = "pods with pod-level resources cannot be resized"
QOS_CHANGE_MESSAGE = "Pod QOS Class may not change as a result of resizing"
CPU_STATIC_MESSAGE = (
    'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
)
MEMORY_STATIC_MESSAGE = (
    'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'
)

# kubelet_pod_infeasible_resizes' reason_detail per refusal, as upstream; the
# last two are refusals of the API server's that this kubelet checks again.
INFEASIBLE_DETAIL = {
    STATIC_POD_MESSAGE: "static_pod",
    SWAP_MESSAGE: "swap_limitation",
    CPU_STATIC_MESSAGE: "guaranteed_pod_cpu_manager_static_policy",
    MEMORY_STATIC_MESSAGE: "guaranteed_pod_memory_manager_static_policy",
    POD_LEVEL_MESSAGE: "pod_level_resources",
    QOS_CHANGE_MESSAGE: "qos_class_change",
}
CAPACITY_DETAIL = "insufficient_node_allocatable"

# What made a deferred resize be looked at again (retry_trigger).
TRIGGER_POD_RESIZED = "pod_resized"
TRIGGER_POD_UPDATED = "pod_updated"
TRIGGER_PODS_ADDED = "pods_added"
TRIGGER_PODS_REMOVED = "pods_removed"
TRIGGER_PERIODIC = "periodic_retry"


class Admission(Protocol):
    """The admitted pods' totals (the admission code keeps them; this manager
    says what size a resized pod holds)."""

    def refit(self, uid: str, pod: Pod) -> Rejection | None:
        """A resize's fit among the other admitted pods (canAdmitPod for the new size)."""
        ...

    def recount(self, uid: str, pod: Pod) -> bool:
        """The pod counts at these requests from now on; True when that freed some."""
        ...


# Does a container of the pod swap (GetContainerSwapBehavior != NoSwap)?
Swaps = Callable[[Pod, Container], bool]


@dataclass(frozen=True)
class Decision:
    """The outcome of one look at a pod's resize."""

    accepted: bool
    reason: str = ""  # Infeasible or Deferred when not accepted
    message: str = ""
    detail: str = ""  # why Infeasible, as kubelet_pod_infeasible_resizes counts it


@dataclass(frozen=True)
class NodeLimits:
    """What the feasibility check reads of the node."""

    cpu_m: int
    memory: int
    cpu_manager_static: bool = False
    memory_manager_static: bool = False


def resizable_containers(pod: Pod) -> list[Container]:
    """Containers and sidecars: the ones whose resources can change in place
    (IsResizableContainer); init containers that run to completion cannot."""
    spec = pod["spec"]
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [*spec.get("containers", []), *sidecars]


def allocation_from_pod(pod: Pod) -> PodResources:
    return {c["name"]: normalize(c.get("resources")) for c in resizable_containers(pod)}


def update_pod_from_allocation(pod: Pod, alloc: PodResources | None) -> tuple[Pod, bool]:
    """The pod with its allocated resources in place of the desired ones (a
    copy when anything differs)."""
    if not alloc:
        return pod, False
    out: Pod | None = None
    for key in CONTAINER_LISTS:
        cs = pod["spec"].get(key) or []
        for i, c in enumerate(cs):
            a = alloc.get(c["name"])
            if a is None or normalize(c.get("resources")) == a:
                continue
            if out is None:
                out = copy.deepcopy(pod)
            target: list[Container] = out["spec"][key]
            target[i]["resources"] = as_api(a)
    return (pod, False) if out is None else (out, True)


def resize_allowed(desired: Pod, allocated: Pod) -> str | None:
    """IsInPlacePodVerticalScalingAllowed: why the pod cannot resize at all.
    Beyond upstream's kubelet, the API server's own refusals are checked again
    (a pod that reached the kubelet otherwise, say from an older server):
    pod-level resources (resizing them is not supported in v1.34), and a QoS change,
    which would move the pod to another cgroup."""
    if is_static(desired):
        return STATIC_POD_MESSAGE
    if _pod_level_set(desired) or _pod_level_set(allocated):
        return POD_LEVEL_MESSAGE
    if qos_class(desired) != qos_class(allocated):
        return QOS_CHANGE_MESSAGE
    return None


def _pod_level_set(pod: Pod) -> bool:
    """As the API server's resize check: spec.resources names any resource."""
    res = pod["spec"].get("resources") or {}
    return bool(res.get("requests") or res.get("limits"))


def swap_refusal(desired: Pod, allocated: Pod, swaps: Swaps) -> str | None:
    """A memory request change of a container that swaps, unless its memory
    policy restarts it (disallowResizeForSwappableContainers)."""
    old = {c["name"]: c for c in resizable_containers(allocated)}
    for c in resizable_containers(desired):
        a = old.get(c["name"])
        if a is None:
            continue
        if _mem_request(c) == _mem_request(a) or restarts_for(a, "memory"):
            continue
        if swaps(desired, c) or swaps(allocated, a):
            return SWAP_MESSAGE
    return None


def _mem_request(c: Container) -> int:
    return to_bytes(((c.get("resources") or {}).get("requests") or {}).get("memory", 0))


def restarts_for(c: Container, resource: str) -> bool:
    """resizePolicy of the resource is RestartContainer (NotRequired by default)."""
    for p in c.get("resizePolicy") or []:
        if p.get("resourceName") == resource:
            return p.get("restartPolicy") == "RestartContainer"
    return False


def _request_changed(desired: Pod, alloc: PodResources, resource: str) -> bool:
    for c in resizable_containers(desired):
        want = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        have = (alloc.get(c["name"]) or {}).get("requests", {}).get(resource)
        if (want is None) != (have is None):
            return True
        if want is not None and have is not None:
            conv = cpu_millis if resource == "cpu" else to_bytes
            if conv(want) != conv(have):
                return True
    return False


def feasibility(desired: Pod, alloc: PodResources, node: NodeLimits) -> Decision | None:
    """canResizePod's checks that do not depend on the other pods: None when the
    resize may go on to the fit check, else an Infeasible decision."""
    if qos_class(desired) == "Guaranteed":
        if node.cpu_manager_static and _request_changed(desired, alloc, "cpu"):
            return Decision(
                False, INFEASIBLE, CPU_STATIC_MESSAGE, INFEASIBLE_DETAIL[CPU_STATIC_MESSAGE]
            )
        if node.memory_manager_static and _request_changed(desired, alloc, "memory"):
            return Decision(
                False, INFEASIBLE, MEMORY_STATIC_MESSAGE, INFEASIBLE_DETAIL[MEMORY_STATIC_MESSAGE]
            )
    r = pod_requests(desired)
    if r.cpu_m > node.cpu_m or r.memory > node.memory:
        if r.memory > node.memory:
            msg = f"memory, requested: {r.memory}, capacity: {node.memory}"
        else:
            msg = f"cpu, requested: {r.cpu_m}, capacity: {node.cpu_m}"
        return Decision(
            False, INFEASIBLE, "Node didn't have enough capacity: " + msg, CAPACITY_DETAIL
        )
    return None


def resize_operation(new: int, old: int) -> str:
    """resizeOperationForResources: add, remove, increase, decrease or ""."""
    if old and not new:
        return "remove"
    if new and not old:
        return "add"
    return "decrease" if new < old else "increase" if new > old else ""


def requested_resizes(old: Pod, new: Pod) -> list[tuple[str, str, str]]:
    """(resource, requirement, operation) of every change of a resizable
    container's cpu or memory between two specs of a pod
    (recordContainerResizeOperations): what kubelet_container_requested_resizes_total
    counts."""
    before = {c["name"]: _amounts(c) for c in resizable_containers(old)}
    out = []
    for c in resizable_containers(new):
        o = before.get(c["name"])
        if o is None:
            continue
        for (resource, req), n in _amounts(c).items():
            op = resize_operation(n, o[resource, req])
            if op:
                out.append((resource, req, op))
    return out


def _amounts(c: Container) -> dict[tuple[str, str], int]:
    """(resource, requirement) -> bytes or millicores, 0 when not set."""
    res = c.get("resources") or {}
    out = {}
    for req, values in (("requests", res.get("requests")), ("limits", res.get("limits"))):
        out["memory", req] = to_bytes((values or {}).get("memory") or 0)
        out["cpu", req] = cpu_millis((values or {}).get("cpu") or 0)
    return out


def _larger_requests(c: Container, actuated: Requirements | None) -> dict[str, str]:
    """The actuated cpu and memory requests that exceed the container's."""
    have = (actuated or {}).get("requests") or {}
    want = (c.get("resources") or {}).get("requests") or {}
    out = {}
    for r, conv in (("cpu", cpu_millis), ("memory", to_bytes)):
        if r in have and conv(have[r]) > conv(want.get(r) or 0):
            out[r] = have[r]
    return out


def increases_requests(desired: Pod, allocated: Pod) -> bool:
    new, old = pod_requests(desired), pod_requests(allocated)
    return new.cpu_m > old.cpu_m or new.memory > old.memory


def completion_message(allocated: Pod) -> str:
    """The ResizeCompleted event's text: the allocation, as JSON."""
    spec = allocated["spec"]
    summary: dict[str, list[dict[str, object]]] = {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for key, cs in (("initContainers", sidecars), ("containers", spec.get("containers", []))):
        if cs:
            summary[key] = [
                {"name": c["name"], "resources": dict(normalize(c.get("resources")))} for c in cs
            ]
    return "Pod resize completed: " + json.dumps(summary, separators=(",", ":"))


class AllocationManager:
    """Allocated and actuated resources per pod, the pending resizes and
    their conditions."""

    def __init__(
        self,
        node: NodeLimits,
        admission: Admission,
        conditions: ResizeConditions,
        store: CheckpointStore | None = None,
        swaps: Swaps = lambda _pod, _c: False,
        enabled: bool = True,
    ) -> None:
        self.node, self.admission, self.conditions = node, admission, conditions
        self.swaps = swaps
        # InPlacePodVerticalScaling off: nothing is allocated apart from the
        # spec, a changed spec is not looked at (as upstream's no-op state).
        self.enabled = enabled
        if store is None:
            self.allocated = AllocationState(None, ALLOCATED_FILE)
            self.actuated = AllocationState(None, ACTUATED_FILE)
        else:
            self.allocated = AllocationState.restore(store, ALLOCATED_FILE)
            self.actuated = AllocationState.restore(store, ACTUATED_FILE)
        self.pending: list[str] = []  # UIDs with deferred resizes, in retry order

    # ------------------------------------------------------------ admission
    def allocated_pod(self, pod: Pod) -> Pod:
        """UpdatePodFromAllocation: the pod as the kubelet runs it."""
        return update_pod_from_allocation(pod, self.allocated.get_pod(uid(pod)))[0]

    def admitted_size(self, pod: Pod, before: PodResources | None = None) -> Pod:
        """The pod as admission counts it (after a restart, and while a resize
        is actuated): its allocation, with a container's actuated cpu or memory
        request where larger, or, for one with nothing actuated, its allocation
        `before` the resize (a shrink the runtime has not done yet still holds
        the old size, as upstream's fit reads the status resources); `settle`
        brings it down once done."""
        allocated = self.allocated_pod(pod)
        actuated = self.actuated.get_pod(uid(pod)) or {}
        out: Pod | None = None
        for key in CONTAINER_LISTS:
            cs = allocated["spec"].get(key) or []
            for i, c in enumerate(cs):
                held = actuated.get(c["name"]) or (before or {}).get(c["name"])
                bigger = _larger_requests(c, held)
                if not bigger:
                    continue
                if out is None:
                    out = copy.deepcopy(allocated)
                target: Container = out["spec"][key][i]
                res = target.setdefault("resources", {})
                res.setdefault("requests", {}).update(bigger)
        return allocated if out is None else out

    def settle(self, pod: Pod) -> bool:
        """The pod's resize was actuated: it counts at its allocation now.
        Answers whether that freed cpu or memory."""
        return self.admission.recount(uid(pod), self.allocated_pod(pod))

    def set_allocated(self, pod: Pod) -> None:
        """The pod was admitted (or resized) at these resources."""
        if not self.enabled:
            return
        self.allocated.set_pod(uid(pod), allocation_from_pod(pod))

    def set_actuated(self, pod: Pod, c: Container) -> None:
        """The container runs (was started or updated) with these resources."""
        if not self.enabled:
            return
        self.actuated.set_container(uid(pod), c["name"], normalize(c.get("resources")))

    def get_actuated(self, pod_uid: str, container: str) -> Requirements | None:
        return self.actuated.get_container(pod_uid, container)

    def remove_pod(self, pod_uid: str) -> None:
        self.allocated.remove_pod(pod_uid)
        self.actuated.remove_pod(pod_uid)
        self.conditions.forget(pod_uid)
        if pod_uid in self.pending:
            self.pending.remove(pod_uid)

    def remove_orphans(self, keep: set[str]) -> None:
        self.allocated.remove_orphans(keep)
        self.actuated.remove_orphans(keep)

    # --------------------------------------------------------------- resize
    def handle_resize(self, pod: Pod, trigger: str = TRIGGER_POD_UPDATED) -> bool:
        """handlePodResourcesResize: look at the desired resources of an admitted
        pod; answers whether the allocation changed. Sets or clears the
        PodResizePending condition; a deferred resize is queued for retries.
        `trigger` is why it is looked at (a deferred one accepted counts it)."""
        if not self.enabled:
            return False
        u = uid(pod)
        alloc = self.allocated.get_pod(u)
        allocated, changed = update_pod_from_allocation(pod, alloc)
        if not changed or alloc is None:
            self.conditions.clear_pending(u)
            self._unqueue(u)
            return False
        d = self.decide(pod, allocated, alloc)
        was_deferred = self.conditions.is_reason(u, DEFERRED)
        if not d.accepted:
            if d.reason == INFEASIBLE:
                metrics.POD_INFEASIBLE_RESIZES.labels(d.detail).inc()
            self.conditions.set_pending(u, d.reason, d.message, generation(pod))
            if d.reason == DEFERRED:
                self._queue(u)
            else:
                self._unqueue(u)
            return False
        self.set_allocated(pod)
        # The new size counts at once, the old where larger until `settle`.
        self.admission.recount(u, self.admitted_size(pod, alloc))
        self._unqueue(u)
        if was_deferred:
            metrics.POD_DEFERRED_ACCEPTED_RESIZES.labels(trigger).inc()
        self.conditions.clear_pending(u)
        # A new resize restarts the in-progress condition at this generation.
        self.conditions.clear_in_progress(u)
        self.conditions.set_in_progress(u, "", "", generation(pod))
        log.info("Pod %s: resize accepted, allocation updated", u)
        return True

    def decide(self, desired: Pod, allocated: Pod, alloc: PodResources) -> Decision:
        msg = resize_allowed(desired, allocated) or swap_refusal(desired, allocated, self.swaps)
        if msg is not None:
            return Decision(False, INFEASIBLE, msg, INFEASIBLE_DETAIL[msg])
        infeasible = feasibility(desired, alloc, self.node)
        if infeasible is not None:
            return infeasible
        rejected = self.admission.refit(uid(desired), desired)
        if rejected is not None:
            return Decision(False, DEFERRED, rejected.message)
        return Decision(True)

    def retry_pending(self, get_pod: Callable[[str], Pod | None], trigger: str) -> list[str]:
        """Pods left or shrank: deferred resizes are looked at again, those that
        do not grow requests first (retryPendingResizes). Answers the UIDs whose
        allocation or condition changed (to be synced)."""
        pods = [(u, p) for u in self.pending if (p := get_pod(u)) is not None]
        pods.sort(key=lambda up: self._retry_order(up[1]))
        self.pending = []
        out = []
        for u, p in pods:
            before = self.conditions.of(u)
            if self.handle_resize(p, trigger) or self.conditions.of(u) != before:
                out.append(u)
        return out

    def _retry_order(self, pod: Pod) -> tuple[int, int, int, str]:
        grows = increases_requests(pod, self.allocated_pod(pod))
        prio = int(pod["spec"].get("priority") or 0)
        guaranteed = qos_class(pod) == "Guaranteed"
        cond = self.conditions.get(uid(pod), "PodResizePending")
        since = cond.get("lastTransitionTime", "~") if cond is not None else "~"
        return (int(grows), -prio, int(not guaranteed), str(since))

    def _queue(self, u: str) -> None:
        if u not in self.pending:
            self.pending.append(u)

    def _unqueue(self, u: str) -> None:
        if u in self.pending:
            self.pending.remove(u)

    def record_requested(self, old: Pod | None, new: Pod) -> None:
        """A changed spec: count its container resizes, as upstream does before
        looking at the resize (kubelet_container_requested_resizes_total)."""
        if not self.enabled or old is None:
            return
        for resource, requirement, op in requested_resizes(old, new):
            metrics.CONTAINER_REQUESTED_RESIZES.labels(resource, requirement, op).inc()

    # ------------------------------------------------------------- progress
    def check_in_progress(self, allocated: Pod, running: set[str]) -> str | None:
        """CheckPodResizeInProgress: keep PodResizeInProgress while a running
        container is not at its allocation; once all are, clear it and answer
        the ResizeCompleted event's message."""
        if not self.enabled:
            return None
        u = uid(allocated)
        if self.in_progress(allocated, running):
            self.conditions.set_in_progress(u, "", "", generation(allocated))
            return None
        if self.conditions.clear_in_progress(u):
            return completion_message(allocated)
        return None

    def in_progress(self, allocated: Pod, running: set[str]) -> bool:
        """isPodResizeInProgress: a running resizable container whose actuated
        cpu or memory differs from its allocation."""
        u = uid(allocated)
        for c in resizable_containers(allocated):
            if c["name"] not in running:
                continue
            if resources_of(c.get("resources")) != resources_of(self.get_actuated(u, c["name"])):
                return True
        return False
