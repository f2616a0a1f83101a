"""Pod admission at the door (pkg/kubelet/lifecycle/predicate.go: the OS checks
and the resource fit).

A pod is admitted when the node's pod count stays within maxPods and the
requests of the admitted, non-terminal pods plus its own fit in allocatable.
A refused pod is failed with the upstream reason (OutOfpods, OutOfcpu,
OutOfmemory) and message, and never started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubelet.types import Pod
from kubelet.util.quantity import cpu_millis, to_bytes


@dataclass
class Requests:
    cpu_m: int = 0
    memory: int = 0


def pod_requests(pod: Pod) -> Requests:
    """The larger of the containers' sum and the biggest init container, plus overhead."""
    spec = pod.get("spec") or {}

    def req(c: dict[str, Any]) -> Requests:
        r = (c.get("resources") or {}).get("requests") or {}
        return Requests(cpu_millis(r.get("cpu", 0)), to_bytes(r.get("memory", 0)))

    total = Requests()
    for c in spec.get("containers") or []:
        r = req(c)
        total.cpu_m += r.cpu_m
        total.memory += r.memory
    for c in spec.get("initContainers") or []:
        r = req(c)
        total.cpu_m = max(total.cpu_m, r.cpu_m)
        total.memory = max(total.memory, r.memory)
    overhead = spec.get("overhead") or {}
    total.cpu_m += cpu_millis(overhead.get("cpu", 0))
    total.memory += to_bytes(overhead.get("memory", 0))
    return total


@dataclass
class Rejection:
    reason: str
    message: str


class Admitter:
    """Keeps the running total of admitted pods' requests, so admission is O(1)."""

    def __init__(self, max_pods: int, allocatable_cpu_m: int, allocatable_memory: int) -> None:
        self.max_pods = max_pods
        self.cpu_m = allocatable_cpu_m
        self.memory = allocatable_memory
        self._admitted: dict[str, Requests] = {}
        self.used = Requests()

    def admit(self, uid: str, pod: Pod) -> Rejection | None:
        if uid in self._admitted:
            return None
        # Checks that preemption cannot help come first, as upstream.
        rejection = os_mismatch(pod)
        if rejection is not None:
            return rejection
        r = pod_requests(pod)
        n = len(self._admitted)
        if n + 1 > self.max_pods:
            return _insufficient("pods", 1, n, self.max_pods)
        if r.cpu_m and self.used.cpu_m + r.cpu_m > self.cpu_m:
            return _insufficient("cpu", r.cpu_m, self.used.cpu_m, self.cpu_m)
        if r.memory and self.used.memory + r.memory > self.memory:
            return _insufficient("memory", r.memory, self.used.memory, self.memory)
        self._admitted[uid] = r
        self.used.cpu_m += r.cpu_m
        self.used.memory += r.memory
        return None

    def release(self, uid: str) -> None:
        """The pod finished or went away: its requests stop counting."""
        r = self._admitted.pop(uid, None)
        if r is not None:
            self.used.cpu_m -= r.cpu_m
            self.used.memory -= r.memory

    def __len__(self) -> int:
        return len(self._admitted)


NODE_OS = "linux"
OS_LABEL = "kubernetes.io/os"


def os_mismatch(pod: Pod) -> Rejection | None:
    """A pod labelled for, or declaring (spec.os), another OS than this node's."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if OS_LABEL in labels and labels[OS_LABEL] != NODE_OS:
        return Rejection(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    pod_os = ((pod.get("spec") or {}).get("os") or {}).get("name")
    if pod_os is not None and pod_os != NODE_OS:
        return Rejection(
            "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"
        )
    return None


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
    )
