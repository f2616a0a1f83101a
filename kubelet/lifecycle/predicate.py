"""Pod admission at the door (pkg/kubelet/lifecycle/predicate.go: the OS checks,
the resource fit and the host ports).

A pod is admitted when the node's pod count stays within maxPods, the
requests of the admitted, non-terminal pods plus its own fit in allocatable,
and none of its host ports is taken by an admitted pod. A refused pod is
failed with the upstream reason (OutOfpods, OutOfcpu, OutOfmemory, NodePorts)
and message, and never started.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kubelet import resourcehelper
from kubelet.types import Pod


@dataclass
class Requests:
    cpu_m: int = 0
    memory: int = 0


def pod_requests(pod: Pod) -> Requests:
    """PodRequests in cpu and memory: the containers' aggregate (sidecars
    included) or the pod-level requests, plus overhead (kubelet/resourcehelper)."""
    r = resourcehelper.pod_requests(pod)
    return Requests(r.get("cpu", 0), r.get("memory", 0))


@dataclass
class Rejection:
    reason: str
    message: str


class Admitter:
    """Keeps the running total of admitted pods' requests and an index of their
    host ports, so admitting a pod costs its own size, not the node's."""

    def __init__(self, max_pods: int, allocatable_cpu_m: int, allocatable_memory: int) -> None:
        self.max_pods = max_pods
        self.cpu_m = allocatable_cpu_m
        self.memory = allocatable_memory
        self._admitted: dict[str, Requests] = {}
        self._ports: dict[str, list[HostPort]] = {}
        self.used = Requests()
        self.used_ports = HostPortIndex()

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
        ports = host_ports(pod)
        if any(self.used_ports.conflicts(p) for p in ports):
            return NODE_PORTS_REJECTION
        self._admitted[uid] = r
        self.used.cpu_m += r.cpu_m
        self.used.memory += r.memory
        if ports:
            self._ports[uid] = ports
            self.used_ports.add(ports)
        return None

    def refit(self, uid: str, pod: Pod) -> Rejection | None:
        """An in-place resize of an admitted pod: do its new requests fit beside
        the other pods'? When they do, they count from now on."""
        old = self._admitted.get(uid)
        if old is None:
            return None
        r = pod_requests(pod)
        cpu, mem = self.used.cpu_m - old.cpu_m, self.used.memory - old.memory
        if r.cpu_m and cpu + r.cpu_m > self.cpu_m:
            return _insufficient("cpu", r.cpu_m, cpu, self.cpu_m)
        if r.memory and mem + r.memory > self.memory:
            return _insufficient("memory", r.memory, mem, self.memory)
        self._admitted[uid] = r
        self.used = Requests(cpu + r.cpu_m, mem + r.memory)
        return None

    def release(self, uid: str) -> None:
        """The pod finished or went away: its requests and host ports stop counting."""
        r = self._admitted.pop(uid, None)
        if r is not None:
            self.used.cpu_m -= r.cpu_m
            self.used.memory -= r.memory
        self.used_ports.remove(self._ports.pop(uid, []))

    def __len__(self) -> int:
        return len(self._admitted)


# The scheduler's NodePorts plugin, as the kubelet's generalFilter reports it.
NODE_PORTS_REJECTION = Rejection(
    "NodePorts",
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
)
BIND_ALL = "0.0.0.0"


@dataclass(frozen=True)
class HostPort:
    ip: str  # "0.0.0.0" for every address
    protocol: str
    port: int


def host_ports(pod: Pod) -> list[HostPort]:
    """The host ports a pod holds for its whole life (GetHostPorts): its
    containers' and its sidecars' (restartable init containers), not those of
    init containers that run to completion."""
    spec = pod.get("spec") or {}
    containers = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    containers += spec.get("containers") or []
    out = []
    for c in containers:
        for p in c.get("ports") or []:
            port = int(p.get("hostPort") or 0)
            if port > 0:
                out.append(HostPort(p.get("hostIP") or BIND_ALL, p.get("protocol") or "TCP", port))
    return out


class HostPortIndex:
    """Host ports in use (HostPortInfo), counted per holder: a release never frees
    a port that another admitted pod still holds."""

    def __init__(self) -> None:
        self._by_ip: Counter[HostPort] = Counter()
        self._any_ip: Counter[tuple[str, int]] = Counter()  # (protocol, port) on any IP

    def conflicts(self, p: HostPort) -> bool:
        """0.0.0.0 clashes with the port on any address; an address with itself and 0.0.0.0."""
        if p.ip == BIND_ALL:
            return self._any_ip[(p.protocol, p.port)] > 0
        return self._by_ip[p] > 0 or self._by_ip[HostPort(BIND_ALL, p.protocol, p.port)] > 0

    def add(self, ports: list[HostPort]) -> None:
        for p in ports:
            self._by_ip[p] += 1
            self._any_ip[(p.protocol, p.port)] += 1

    def remove(self, ports: list[HostPort]) -> None:
        for p in ports:
            self._by_ip[p] -= 1
            if self._by_ip[p] <= 0:
                del self._by_ip[p]
            key = (p.protocol, p.port)
            self._any_ip[key] -= 1
            if self._any_ip[key] <= 0:
                del self._any_ip[key]

    def __len__(self) -> int:
        return len(self._by_ip)


NODE_OS = "linux"
OS_LABEL = "kubernetes.io/os"


def os_mismatch(pod: Pod) -> Rejection | None:
    """A pod labelled for, or declaring (spec.os), another OS than this node's."""
    labels = pod["metadata"].get("labels") or {}
    if OS_LABEL in labels and labels[OS_LABEL] != NODE_OS:
        return Rejection(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    declared = pod["spec"].get("os")
    pod_os = declared.get("name") if declared is not None else None
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
