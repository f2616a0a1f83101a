"""Pod admission at the door (pkg/kubelet/lifecycle/predicate.go: the OS checks,
then the scheduler's filters as generalFilter runs them).

A pod is admitted when the node's pod count stays within maxPods, the
requests of the admitted, non-terminal pods plus its own fit in allocatable
(cpu, memory, ephemeral-storage, hugepages and extended resources), the node
matches its node selector and required node affinity and is the node it
names, none of its host ports is taken by an admitted pod, and it tolerates
the node's NoExecute taints. As upstream, every failure is found and the
first in that order is the reason: OutOf<resource>, NodeAffinity, NodeName,
NodePorts, TaintToleration. A refused pod is never started.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubelet import resourcehelper
from kubelet.lifecycle.node_predicates import (
    node_affinity_mismatch,
    node_name_mismatch,
    untolerated_no_execute,
)
from kubelet.lifecycle.rejection import Rejection
from kubelet.types import Node, Pod, all_containers, full_name
from kubelet.util.quantity import to_bytes
from kubelet.util.validation import is_extended_resource_name

__all__ = ["Admitter", "InsufficientResource", "Rejection", "Requests", "pod_requests"]

log = logging.getLogger(__name__)


@dataclass
class Requests:
    cpu_m: int = 0
    memory: int = 0


def pod_requests(pod: Pod) -> Requests:
    """PodRequests in cpu and memory: the containers' aggregate (sidecars
    included) or the pod-level requests, plus overhead (kubelet/resourcehelper)."""
    r = resourcehelper.pod_requests(pod)
    return Requests(r.get("cpu", 0), r.get("memory", 0))


# What the fit check reads as cpu, memory and pods; every other resource in
# the node's allocatable is counted by name (NodeInfo's scalar resources).
_FIXED = ("cpu", "memory", "pods")
EPHEMERAL_STORAGE = "ephemeral-storage"


def node_allocatable(node: Node) -> dict[str, int]:
    """The node's allocatable beyond cpu, memory and pods, as integers
    (Quantity.Value: bytes for hugepages and storage, counts for the rest)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: to_bytes(v) for k, v in alloc.items() if k not in _FIXED}


def named_requests(pod: Pod, allocatable: Mapping[str, int]) -> dict[str, int]:
    """The pod's requests beyond cpu and memory (resourcehelper.pod_requests:
    pod-level hugepages, or the containers' aggregate, plus overhead). An extended resource the node
    does not list is left to others (removeMissingExtendedResources: cluster
    level or DRA-backed resources), as upstream."""

    def counted(name: str) -> bool:
        if name in _FIXED:
            return False
        return name in allocatable or not is_extended_resource_name(name)

    return {k: v for k, v in resourcehelper.pod_requests(pod).items() if counted(k) and v > 0}


class Admitter:
    """Keeps the running total of admitted pods' requests and an index of their
    host ports, so admitting a pod costs its own size, not the node's."""

    def __init__(self, max_pods: int, allocatable_cpu_m: int, allocatable_memory: int) -> None:
        self.max_pods = max_pods
        self.cpu_m = allocatable_cpu_m
        self.memory = allocatable_memory
        self._admitted: dict[str, Requests] = {}
        self._ports: dict[str, list[HostPort]] = {}
        self._named: dict[str, dict[str, int]] = {}
        self.used = Requests()
        self.used_named: Counter[str] = Counter()
        self._unlisted: set[str] = set()  # extended resources already logged as unlisted
        self.used_ports = HostPortIndex()

    def admit(self, uid: str, pod: Pod, node: Node) -> Rejection | None:
        """node: the Node as admission sees it (its labels, taints and
        allocatable; getNodeAnyWay). The first failure is the reason."""
        if uid in self._admitted:
            return None
        failures = self.failures(pod, node, first=True)
        if failures:
            return failures[0]
        self.count(uid, pod, node)
        return None

    def failures(self, pod: Pod, node: Node, first: bool = False) -> list[Rejection]:
        """Every reason the pod does not fit, in upstream's order (what an
        admission failure handler is given); `first`: stop at the first."""
        # Checks that preemption cannot help come first, as upstream.
        rejection = os_mismatch(pod) or supplemental_groups_policy_unsupported(pod, node)
        if rejection is not None:
            return [rejection]
        allocatable = node_allocatable(node)
        named = named_requests(pod, allocatable)
        self._note_unlisted(pod, allocatable)
        out = self._shortfalls(pod_requests(pod), named, allocatable)
        if first and out:
            return out[:1]
        ports = host_ports(pod)
        checks: tuple[Callable[[], Rejection | None], ...] = (
            lambda: node_affinity_mismatch(pod, node),
            lambda: node_name_mismatch(pod, node),
            lambda: NODE_PORTS_REJECTION if any(map(self.used_ports.conflicts, ports)) else None,
            lambda: untolerated_no_execute(pod, node),
        )
        for check in checks:
            if (found := check()) is not None:
                out.append(found)
                if first:
                    break
        return out

    def count(self, uid: str, pod: Pod, node: Node) -> None:
        """The admitted pod's requests and host ports count from now on (also
        for a pod admitted after preemption freed room for it)."""
        r = pod_requests(pod)
        named = named_requests(pod, node_allocatable(node))
        self._admitted[uid] = r
        self.used.cpu_m += r.cpu_m
        self.used.memory += r.memory
        if named:
            self._named[uid] = named
            self.used_named.update(named)
        ports = host_ports(pod)
        if ports:
            self._ports[uid] = ports
            self.used_ports.add(ports)

    def _note_unlisted(self, pod: Pod, allocatable: Mapping[str, int]) -> None:
        """Say once per resource that an extended resource the node does not
        list is not checked here (upstream skips it without a word)."""
        for c in all_containers(pod):
            for r in (c.get("resources") or {}).get("requests") or {}:
                if r in allocatable or r in self._unlisted or not is_extended_resource_name(r):
                    continue
                self._unlisted.add(r)
                log.info("Extended resource %s (pod %s) is not in the node's allocatable: not "
                         "checked at admission (a cluster-level or DRA resource, as upstream)",
                         r, full_name(pod))  # fmt: skip

    def _shortfalls(
        self, r: Requests, named: dict[str, int], allocatable: Mapping[str, int]
    ) -> list[Rejection]:
        """Every resource that does not fit (fitsRequest's order: pods, cpu,
        memory, ephemeral-storage, then the rest, here by name)."""
        out = []
        n = len(self._admitted)
        if n + 1 > self.max_pods:
            out.append(_insufficient("pods", 1, n, self.max_pods))
        if r.cpu_m and self.used.cpu_m + r.cpu_m > self.cpu_m:
            out.append(_insufficient("cpu", r.cpu_m, self.used.cpu_m, self.cpu_m))
        if r.memory and self.used.memory + r.memory > self.memory:
            out.append(_insufficient("memory", r.memory, self.used.memory, self.memory))
        # Without local storage isolation the node lists no ephemeral-storage:
        # requests of it are then not counted.
        if EPHEMERAL_STORAGE not in allocatable:
            named = {k: v for k, v in named.items() if k != EPHEMERAL_STORAGE}
        for name in sorted(named, key=lambda k: (k != EPHEMERAL_STORAGE, k)):
            used, cap = self.used_named[name], allocatable.get(name, 0)
            if used + named[name] > cap:
                out.append(_insufficient(name, named[name], used, cap))
        return out

    def refit(self, uid: str, pod: Pod) -> Rejection | None:
        """An in-place resize of an admitted pod: do its new requests fit
        beside the other pods'? Counts nothing: once the resize is accepted,
        the allocation manager says what size the pod holds (`recount`)."""
        old = self._admitted.get(uid)
        if old is None:
            return None
        r = pod_requests(pod)
        cpu, mem = self.used.cpu_m - old.cpu_m, self.used.memory - old.memory
        if r.cpu_m and cpu + r.cpu_m > self.cpu_m:
            return _insufficient("cpu", r.cpu_m, cpu, self.cpu_m)
        if r.memory and mem + r.memory > self.memory:
            return _insufficient("memory", r.memory, mem, self.memory)
        return None

    def recount(self, uid: str, pod: Pod) -> bool:
        """An admitted pod counts at `pod`'s requests from now on (the size
        the allocation manager says it holds during and after a resize).
        Answers whether that freed cpu or memory."""
        old = self._admitted.get(uid)
        if old is None:
            return False
        r = pod_requests(pod)
        self._admitted[uid] = r
        self.used = Requests(
            self.used.cpu_m - old.cpu_m + r.cpu_m, self.used.memory - old.memory + r.memory
        )
        return r.cpu_m < old.cpu_m or r.memory < old.memory

    def release(self, uid: str) -> None:
        """The pod finished or went away: its requests and host ports stop counting."""
        r = self._admitted.pop(uid, None)
        if r is not None:
            self.used.cpu_m -= r.cpu_m
            self.used.memory -= r.memory
        self.used_named.subtract(self._named.pop(uid, {}))
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


@dataclass
class InsufficientResource(Rejection):
    """A resource the pod does not fit in (InsufficientResourceError): what
    the critical pod preemption handler frees."""

    resource: str
    requested: int
    used: int
    capacity: int


SUPPLEMENTAL_GROUPS_POLICY_REJECTION = Rejection(
    "SupplementalGroupsPolicyNotSupported",
    "SupplementalGroupsPolicy=Strict is not supported in this node",
)


def supplemental_groups_policy_unsupported(pod: Pod, node: Node) -> Rejection | None:
    """A pod asking for the Strict policy on a node whose runtime does not say
    it supports it (node.status.features; the gate is beta at v1.34, so the
    check holds whatever the gate's value: off, the node reports no features)."""
    policy = (pod["spec"].get("securityContext") or {}).get("supplementalGroupsPolicy")
    if policy != "Strict":
        return None
    features = (node.get("status") or {}).get("features") or {}
    if features.get("supplementalGroupsPolicy"):
        return None
    log.info("Failed to admit pod %s: %s", full_name(pod),
             SUPPLEMENTAL_GROUPS_POLICY_REJECTION.message)  # fmt: skip
    return SUPPLEMENTAL_GROUPS_POLICY_REJECTION


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> Rejection:
    return InsufficientResource(
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
        resource, requested, used, capacity,
    )  # fmt: skip
