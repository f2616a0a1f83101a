"""The static CPU manager policy (pkg/kubelet/cm/cpumanager/policy_static.go).

A container of a Guaranteed pod whose CPU request is a whole number gets that
many CPUs for itself; everything else runs on the shared pool (the state's
default set): all CPUs minus those handed out. The reserved CPUs (reservedSystemCPUs,
or ceil(kube+system reserved cpu) taken by topology from the lowest cores) stay
in the shared pool and are never handed out; with strict-cpu-reservation they
leave the shared pool too. CPUs of a finished init container are reused by the
app containers of the same pod.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from kubelet.cm import metrics
from kubelet.cm.cpumanager import cpu_assignment as ca
from kubelet.cm.cpumanager.policy_options import (
    StaticPolicyOptions,
    new_static_policy_options,
    validate_static_policy_options,
)
from kubelet.cm.cpumanager.state import CPUManagerState
from kubelet.cm.cpumanager.topology import CPUTopology
from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import ProviderHints, TopologyHint
from kubelet.cm.topologymanager.topology_manager import (
    AdmissionError,
    Store,
    init_and_app_containers,
)
from kubelet.features import Feature, FeatureGate
from kubelet.types import Container, Pod, qos_class, uid
from kubelet.util.cpuset import EMPTY, CPUSet, format_cpus
from kubelet.util.quantity import cpu_millis

log = logging.getLogger(__name__)

POLICY_STATIC = "static"


class SMTAlignmentError(AdmissionError):
    reason = "SMTAlignmentError"

    def __init__(self, requested: int, per_core: int, available: int | None = None) -> None:
        if available is None:
            msg = (
                f"SMT Alignment Error: requested {requested} cpus not multiple cpus per core "
                f"= {per_core}"
            )
        else:
            msg = (
                "SMT Alignment Error: not enough free physical CPUs: available physical CPUs "
                f"= {available}, requested CPUs = {requested}, CPUs per core = {per_core}"
            )
        super().__init__(msg)


def effective_requests(c: Container) -> dict[str, Any]:
    """Requests as API defaulting leaves them: a limit stands in for a missing request."""
    res = c.get("resources") or {}
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def is_restartable_init(c: Container) -> bool:
    return c.get("restartPolicy") == "Always"


def pod_level_resources_set(pod: Pod) -> bool:
    """IsPodLevelResourcesSet: the pod (not its containers) sets cpu or memory."""
    res = pod["spec"].get("resources") or {}
    named = [*(res.get("requests") or {}), *(res.get("limits") or {})]
    return any(r in ("cpu", "memory") for r in named)


def guaranteed_cpus(pod: Pod, c: Container) -> int:
    """The exclusive CPUs a container asks for: its integral CPU request in a Guaranteed pod."""
    if qos_class(pod) != "Guaranteed":
        return 0
    cpu = effective_requests(c).get("cpu")
    if cpu is None:
        return 0
    milli = cpu_millis(cpu)
    return milli // 1000 if milli % 1000 == 0 else 0


def pod_guaranteed_cpus(pod: Pod) -> int:
    """The larger of the long-running containers' sum and the biggest init container's need."""
    spec = pod.get("spec") or {}
    by_init = by_restartable = 0
    for c in spec.get("initContainers") or []:
        if "cpu" not in effective_requests(c):
            continue
        n = guaranteed_cpus(pod, c)
        if is_restartable_init(c):
            by_restartable += n
        elif by_restartable + n > by_init:
            by_init = by_restartable + n
    by_app = sum(
        guaranteed_cpus(pod, c)
        for c in spec.get("containers") or []
        if "cpu" in effective_requests(c)
    )
    return max(by_init, by_app + by_restartable)


class StaticPolicy:
    name = POLICY_STATIC

    def __init__(
        self,
        topo: CPUTopology,
        num_reserved: int,
        reserved_cpus: CPUSet,
        affinity: Store,
        options: dict[str, str],
        gates: FeatureGate,
    ) -> None:
        """NewStaticPolicy; ValueError with upstream's message when it cannot be built."""
        self.opts: StaticPolicyOptions = new_static_policy_options(options, gates)
        # PodLevelResources: pods with pod-level resources stay on the shared pool.
        self.pod_level_resources = gates.enabled(Feature.PodLevelResources)
        validate_static_policy_options(self.opts, topo, affinity.policy_name)
        self.topo = topo
        self.affinity = affinity
        self.group = topo.cpus_per_core()
        # pod UID -> CPUs of its init containers that its app containers may take
        self.cpus_to_reuse: dict[str, CPUSet] = {}
        if reserved_cpus:
            reserved = reserved_cpus
        else:
            try:
                reserved = self.take_by_topology(topo.details.cpus(), num_reserved)
            except ca.AllocationError:
                reserved = EMPTY
        if len(reserved) != num_reserved:
            raise ValueError(
                f"[cpumanager] unable to reserve the required amount of CPUs (size of "
                f"{format_cpus(reserved)} did not equal {num_reserved})"
            )
        self.reserved: CPUSet = reserved
        # The reserved CPUs' core siblings: never part of a full-pcpus-only allocation.
        self.reserved_physical: CPUSet = frozenset().union(
            *(topo.details.cpus_in_cores(topo.details[c].core) for c in reserved)
        )
        log.info(
            "Static policy: reserved CPUs %s (physical %s), options %s",
            format_cpus(reserved),
            format_cpus(self.reserved_physical),
            self.opts,
        )

    def _pod_level(self, pod: Pod) -> bool:
        return self.pod_level_resources and pod_level_resources_set(pod)

    # --------------------------------------------------------------- state
    def start(self, s: CPUManagerState) -> None:
        """validateState: ValueError when the state does not fit this machine and config."""
        assignments = s.get_assignments()
        default = s.get_default_cpuset()
        all_cpus = self.topo.details.cpus()
        if self.opts.strict_cpu_reservation:
            all_cpus = all_cpus - self.reserved
        if not default:
            if assignments:
                raise ValueError("default cpuset cannot be empty")
            s.set_default_cpuset(all_cpus)
            return
        if self.opts.strict_cpu_reservation:
            if self.reserved & default:
                raise ValueError(
                    f'some of strictly reserved cpus: "{format_cpus(self.reserved & default)}" '
                    f'are present in defaultCpuSet: "{format_cpus(default)}"'
                )
        elif self.reserved & default != self.reserved:
            raise ValueError(
                f'not all reserved cpus: "{format_cpus(self.reserved)}" are present in '
                f'defaultCpuSet: "{format_cpus(default)}"'
            )
        known = set(default)
        for pod, containers in assignments.items():
            for name, cpus in containers.items():
                if default & cpus:
                    raise ValueError(
                        f'pod: {pod}, container: {name} cpuset: "{format_cpus(cpus)}" overlaps '
                        f'with default cpuset "{format_cpus(default)}"'
                    )
                known |= cpus
        if known != all_cpus:
            raise ValueError(
                f'current set of available CPUs "{format_cpus(all_cpus)}" doesn\'t match with '
                f'CPUs in state "{format_cpus(known)}"'
            )

    def allocatable_cpus(self, s: CPUManagerState) -> CPUSet:
        return self.topo.details.cpus() - self.reserved

    def available_cpus(self, s: CPUManagerState) -> CPUSet:
        return s.get_default_cpuset() - self.reserved

    # ----------------------------------------------------------- allocation
    def take_by_topology(self, available: CPUSet, n: int) -> CPUSet:
        sorting = ca.SPREAD if self.opts.distribute_across_cores else ca.PACKED
        if self.opts.distribute_across_numa:
            group = self.group if self.opts.full_pcpus_only else 1
            return ca.take_by_topology_numa_distributed(self.topo, available, n, group, sorting)
        return ca.take_by_topology_numa_packed(
            self.topo, available, n, sorting, self.opts.prefer_align_by_uncore_cache
        )

    def _update_cpus_to_reuse(self, pod: Pod, c: Container, cpus: CPUSet) -> None:
        pu = uid(pod)
        self.cpus_to_reuse = {pu: self.cpus_to_reuse.get(pu, EMPTY)}
        for init in (pod.get("spec") or {}).get("initContainers") or []:
            if init.get("name") == c["name"]:
                if not is_restartable_init(init):
                    # A finished init container's CPUs go to the app containers after it.
                    self.cpus_to_reuse[pu] |= cpus
                    return
                break  # a sidecar runs alongside the app containers: nothing to reuse
        self.cpus_to_reuse[pu] -= cpus

    def allocate(self, s: CPUManagerState, pod: Pod, c: Container) -> None:
        n = guaranteed_cpus(pod, c)
        if n == 0 or self._pod_level(pod):
            return  # the shared pool
        metrics.CPU_MANAGER_PINNING_REQUESTS.inc()
        done = False
        try:
            self._allocate(s, pod, c, n)
            done = True
        finally:
            self._count_allocation(done)

    def _count_allocation(self, done: bool) -> None:
        if not done:
            metrics.CPU_MANAGER_PINNING_ERRORS.inc()
        if self.opts.full_pcpus_only:
            counter = (
                metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES
                if done
                else metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE
            )
            counter.inc(metrics.ALIGN_SCOPE_CONTAINER, metrics.ALIGNED_PHYSICAL_CPU)

    def _allocate(self, s: CPUManagerState, pod: Pod, c: Container, n: int) -> None:
        if self.opts.full_pcpus_only:
            if n % self.group:
                raise SMTAlignmentError(n, self.group)
            physical = len(s.get_default_cpuset() - self.reserved_physical)
            if n > physical:
                raise SMTAlignmentError(n, self.group, physical)
        existing = s.get_cpuset(uid(pod), c["name"])
        if existing is not None:
            self._update_cpus_to_reuse(pod, c, existing)
            return
        hint = self.affinity.get_affinity(uid(pod), c["name"])
        cpus = self._allocate_cpus(
            s, n, hint.numa_affinity, self.cpus_to_reuse.get(uid(pod), EMPTY)
        )
        s.set_cpuset(uid(pod), c["name"], cpus)
        self._update_cpus_to_reuse(pod, c, cpus)
        if len({self.topo.details[cpu].uncore for cpu in cpus}) <= 1:
            metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES.inc(
                metrics.ALIGN_SCOPE_CONTAINER, metrics.ALIGNED_UNCORE_CACHE
            )
        self.update_metrics(s)
        log.info(
            "Static policy: pod %s container %s gets CPUs %s",
            uid(pod),
            c["name"],
            format_cpus(cpus),
        )

    def _aligned_cpus(self, affinity: int, allocatable: CPUSet) -> CPUSet:
        d = self.topo.details
        bits = bitmask.get_bits(affinity)
        if self.opts.align_by_socket:
            return allocatable & d.cpus_in_sockets(*d.sockets_in_numa_nodes(*bits))
        return allocatable & d.cpus_in_numa_nodes(*bits)

    def _allocate_cpus(
        self, s: CPUManagerState, n: int, affinity: int | None, reusable: CPUSet
    ) -> CPUSet:
        allocatable = self.available_cpus(s) | reusable
        result: CPUSet = EMPTY
        if affinity is not None:
            aligned = self._aligned_cpus(affinity, allocatable)
            result = self.take_by_topology(aligned, min(n, len(aligned)))
        result |= self.take_by_topology(allocatable - result, n - len(result))
        s.set_default_cpuset(s.get_default_cpuset() - result)
        return result

    def remove_container(self, s: CPUManagerState, pod_uid: str, name: str) -> None:
        released = s.get_cpuset(pod_uid, name)
        if released is None:
            return
        siblings = frozenset().union(
            *(c for n, c in s.get_assignments().get(pod_uid, {}).items() if n != name)
        )
        s.delete(pod_uid, name)
        # CPUs a sibling still holds (taken over from an init container) stay out.
        s.set_default_cpuset(s.get_default_cpuset() | (released - siblings))
        self.update_metrics(s)

    def initialize_metrics(self, s: CPUManagerState) -> None:
        """initializeMetrics: the series upstream creates at start, at 0."""
        metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE.touch(
            metrics.ALIGN_SCOPE_CONTAINER, metrics.ALIGNED_PHYSICAL_CPU
        )
        for boundary in (metrics.ALIGNED_PHYSICAL_CPU, metrics.ALIGNED_UNCORE_CACHE):
            metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES.touch(
                metrics.ALIGN_SCOPE_CONTAINER, boundary
            )
        self.update_metrics(s)

    def update_metrics(self, s: CPUManagerState) -> None:
        """The shared pool, the exclusive CPUs and their NUMA nodes, from the
        state (upstream adds and subtracts; a count kept here cannot drift).
        Every NUMA node is reported, 0 when it has no exclusive CPUs."""
        exclusive: CPUSet = frozenset().union(
            *(cpus for names in s.get_assignments().values() for cpus in names.values())
        )
        metrics.CPU_MANAGER_SHARED_POOL_MILLICORES.set(len(self.available_cpus(s)) * 1000)
        metrics.CPU_MANAGER_EXCLUSIVE_CPUS.set(len(exclusive))
        per_numa = dict.fromkeys(self.topo.details.numa_nodes(), 0)
        for cpu in exclusive:
            per_numa[self.topo.details[cpu].numa] += 1
        for node, count in per_numa.items():
            metrics.CPU_MANAGER_ALLOCATION_PER_NUMA.labels(str(node)).set(count)

    # ---------------------------------------------------------------- hints
    def get_topology_hints(self, s: CPUManagerState, pod: Pod, c: Container) -> ProviderHints:
        n = guaranteed_cpus(pod, c)
        if n == 0 or self._pod_level(pod):
            return None
        allocated = s.get_cpuset(uid(pod), c["name"])
        if allocated is not None:
            if len(allocated) != n:
                return {"cpu": []}  # cannot be satisfied: refused unless best-effort
            return {"cpu": self.generate_hints(allocated, EMPTY, n)}
        reusable = self.cpus_to_reuse.get(uid(pod), EMPTY)
        return {"cpu": self.generate_hints(self.available_cpus(s), reusable, n)}

    def get_pod_topology_hints(self, s: CPUManagerState, pod: Pod) -> ProviderHints:
        requested = pod_guaranteed_cpus(pod)
        if requested == 0 or self._pod_level(pod):
            return None
        assigned: CPUSet = EMPTY
        for c in init_and_app_containers(pod):
            allocated = s.get_cpuset(uid(pod), c["name"])
            if allocated is not None:
                if len(allocated) != guaranteed_cpus(pod, c):
                    return {"cpu": []}
                assigned |= allocated
        if len(assigned) == requested:
            return {"cpu": self.generate_hints(assigned, EMPTY, requested)}
        reusable = self.cpus_to_reuse.get(uid(pod), EMPTY) | assigned
        return {"cpu": self.generate_hints(self.available_cpus(s), reusable, requested)}

    def generate_hints(
        self, available: CPUSet, reusable: CPUSet, request: int
    ) -> list[TopologyHint]:
        """One hint per NUMA combination with room for the request; those as
        narrow as the narrowest possible (or socket-aligned) preferred."""
        d = self.topo.details
        numas = sorted(d.numa_nodes())
        min_size = len(numas)
        masks: list[int] = []

        def visit(mask: int) -> None:
            nonlocal min_size
            bits = bitmask.get_bits(mask)
            if len(d.cpus_in_numa_nodes(*bits)) >= request and mask.bit_count() < min_size:
                min_size = mask.bit_count()
            if any(not bitmask.is_set(mask, d[c].numa) for c in reusable):
                return
            matching = len(reusable) + sum(1 for c in available if bitmask.is_set(mask, d[c].numa))
            if matching >= request:
                masks.append(mask)

        bitmask.iterate_bitmasks(numas, visit)
        return [
            TopologyHint(
                m,
                (self.opts.align_by_socket and self._socket_aligned(m, min_size))
                or m.bit_count() == min_size,
            )
            for m in masks
        ]

    def _socket_aligned(self, mask: int, min_size: int) -> bool:
        per_socket = self.topo.num_numa_nodes // self.topo.num_sockets
        if per_socket == 0:
            return False
        min_sockets = (min_size + per_socket - 1) // per_socket
        return len(self.topo.details.sockets_in_numa_nodes(*bitmask.get_bits(mask))) == min_sockets


def num_reserved_cpus(reserved_cpu_millis: int) -> int:
    """ceil(kube-reserved + system-reserved cpu): fractions cannot be exclusive."""
    return math.ceil(reserved_cpu_millis / 1000)
