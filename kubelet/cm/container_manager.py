"""The resource managers of the container manager (pkg/kubelet/cm/container_manager_linux.go):
the topology manager with the CPU and memory managers as its hint providers,
and the narrow interface the runtime manager calls when it creates and removes
containers (InternalContainerLifecycle upstream).

Admission (the topology manager's admit handler) allocates; creating a
container reads the allocation (cpuset_cpus, cpuset_mems); the CPU manager's
reconcile loop keeps running containers' cpusets in line with the shared pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.cpumanager.cpu_manager import CPUManager, Reservation, new_cpu_manager
from kubelet.cm.cpumanager.topology import CPUTopology
from kubelet.cm.cpumanager.topology import discover as discover_cpus
from kubelet.cm.interfaces import ContainerUpdater, PodLookup
from kubelet.cm.memorymanager.memory_manager import MemoryManager, new_memory_manager
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.topologymanager.topology_manager import (
    TopologyManager,
    all_containers,
    new_topology_manager,
)
from kubelet.features import FeatureGate
from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Pod, uid
from kubelet.util import cpuset
from kubelet.util.cpuset import format_cpus
from kubelet.util.quantity import parse_quantity

log = logging.getLogger(__name__)

Container = dict[str, Any]


class ResourceManagerError(Exception):
    """A setting or state file the managers refuse: the kubelet does not start."""


class CPUPinning(NamedTuple):
    """A container's CPU and memory placement for its CRI config."""

    cpuset_cpus: str = ""  # "" leaves it unset
    cpuset_mems: str = ""
    # It has CPUs of its own: no CFS quota (DisableCPUQuotaWithExclusiveCPUs).
    unlimited_quota: bool = False


class ContainerResourceManager(Protocol):
    """What the runtime manager asks when it creates and removes containers."""

    def container_cpuset(self, pod: Pod, container: Container) -> CPUPinning: ...

    def container_created(self, pod: Pod, container: Container, container_id: str) -> None: ...

    def remove_container(self, container_id: str) -> None: ...


def _float32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _eviction_reservation(threshold: str | None, capacity: int) -> Decimal:
    """hardEvictionReservation for one signal; a percentage as Go computes it (float32)."""
    if not threshold:
        return Decimal(0)
    if threshold.endswith("%"):
        pct = _float32(_float32(float(threshold.rstrip("%"))) / 100)
        return Decimal(int(float(capacity) * pct))
    return parse_quantity(threshold)


def node_allocatable_reservation(
    cfg: KubeletConfiguration, memory_capacity: int
) -> dict[str, Decimal]:
    """GetNodeAllocatableReservation: kube + system reserved + hard eviction, non-zero only."""
    out: dict[str, Decimal] = {}
    for m in (cfg.system_reserved, cfg.kube_reserved):
        for name, q in m.items():
            out[name] = out.get(name, Decimal(0)) + parse_quantity(q)
    mem = _eviction_reservation(cfg.eviction_hard.get("memory.available"), memory_capacity)
    out["memory"] = out.get("memory", Decimal(0)) + mem
    return {k: v for k, v in out.items() if v != 0}


def apply_reserved_cpus(cfg: KubeletConfiguration, topo: CPUTopology) -> cpuset.CPUSet:
    """reservedSystemCPUs replaces kube- and system-reserved cpu with its size
    (as upstream's server.go does; applying it twice changes nothing)."""
    if not cfg.reserved_system_cpus:
        return cpuset.EMPTY
    try:
        reserved = cpuset.parse(cfg.reserved_system_cpus)
    except ValueError as err:
        raise ResourceManagerError(f"unable to parse reserved-cpus list: {err}") from None
    online = topo.details.cpus()
    if not reserved <= online:
        raise ResourceManagerError(
            f"reserved-cpus: {cfg.reserved_system_cpus} is not a subset of online-cpus: "
            f"{format_cpus(online)}"
        )
    if reserved:
        log.info("reservedSystemCPUs %s overrides the cpu of kubeReserved and systemReserved",
                 format_cpus(reserved))  # fmt: skip
        cfg.kube_reserved.pop("cpu", None)
        cfg.system_reserved["cpu"] = str(len(reserved))
    return reserved


@dataclass(frozen=True)
class ResourceManagerConfig:
    """What the managers are built from besides the KubeletConfiguration."""

    machine: MachineTopology
    memory_capacity: int
    state_dir: str  # the kubelet's root dir, where upstream keeps the state files
    reserved_cpus: cpuset.CPUSet


class ResourceManagers:
    """ContainerResourceManager for the runtime, admission for the kubelet."""

    def __init__(
        self,
        topology: TopologyManager,
        cpu: CPUManager,
        memory: MemoryManager,
        unlimited_quota_when_pinned: bool = True,
    ) -> None:
        self.topology = topology
        self.cpu = cpu
        self.memory = memory
        self.unlimited_quota_when_pinned = unlimited_quota_when_pinned

    def admit(self, pod: Pod) -> Rejection | None:
        """The topology manager's admit handler (upstream's TopologyAffinityError)."""
        return self.topology.admit(pod)

    def container_cpuset(self, pod: Pod, container: Container) -> CPUPinning:
        """PreCreateContainer: its exclusive CPUs or the shared pool, its memory nodes."""
        if self.cpu.policy is None and self.memory.policy is None:
            return CPUPinning()
        name = container["name"]
        return CPUPinning(
            format_cpus(self.cpu.cpu_affinity(uid(pod), name)),
            ",".join(str(n) for n in self.memory.memory_numa_nodes(uid(pod), name)),
            self.unlimited_quota_when_pinned and bool(self.cpu.exclusive_cpus(uid(pod), name)),
        )

    def pod_has_exclusive_cpus(self, pod: Pod) -> bool:
        """The pod cgroup then gets no CFS quota (DisableCPUQuotaWithExclusiveCPUs)."""
        if self.cpu.policy is None or not self.unlimited_quota_when_pinned:
            return False
        return any(self.cpu.exclusive_cpus(uid(pod), c["name"]) for c in all_containers(pod))

    def container_created(self, pod: Pod, container: Container, container_id: str) -> None:
        self.cpu.add_container(pod, container, container_id)
        self.memory.add_container(pod, container, container_id)
        self.topology.add_container(pod, container, container_id)

    def remove_container(self, container_id: str) -> None:
        self.topology.remove_container(container_id)

    def remove_pod(self, pod_uid: str) -> None:
        """The pod left every source: forget its hints. Its CPUs and memory are
        released by the managers' stale-state pass, once it is no longer active."""
        self.topology.remove_pod(pod_uid)

    async def run(self, stop: asyncio.Event, runtime: ContainerUpdater) -> None:
        await self.cpu.run(stop, runtime)


@contextlib.contextmanager
def _refused(prefix: str = "") -> Iterator[None]:
    """A ValueError from a manager's constructor is the kubelet's refusal to start."""
    try:
        yield
    except ValueError as err:
        raise ResourceManagerError(prefix + str(err)) from None


def _new_topology(
    cfg: KubeletConfiguration, machine: MachineTopology, gates: FeatureGate
) -> TopologyManager:
    options = cfg.topology_manager_policy_options
    if options and not gates.enabled("TopologyManagerPolicyOptions"):
        raise ValueError(
            f"topology manager policy options {options} require feature gates "
            '"TopologyManagerPolicyOptions" enabled'
        )
    return new_topology_manager(
        [n.id for n in machine.nodes],
        {n.id: n.distances or [] for n in machine.nodes},
        cfg.topology_manager_policy,
        cfg.topology_manager_scope,
        options,
        gates,
    )


def new_resource_managers(
    cfg: KubeletConfiguration,
    rc: ResourceManagerConfig,
    gates: FeatureGate,
    pods: PodLookup,
    sources_ready: Callable[[], bool],
) -> ResourceManagers:
    """NewContainerManager's part and Start: ResourceManagerError with upstream's
    message, prefixed as the Go kubelet prefixes it, for anything it refuses."""
    with _refused():
        topology = _new_topology(cfg, rc.machine, gates)
    reservation = node_allocatable_reservation(cfg, rc.memory_capacity)
    cpu_millis = reservation.get("cpu")
    with _refused("start cpu manager error: "):
        cpu = new_cpu_manager(
            cfg.cpu_manager_policy,
            cfg.cpu_manager_policy_options,
            cfg.cpu_manager_reconcile_period,
            discover_cpus(rc.machine),
            Reservation(
                rc.reserved_cpus, None if cpu_millis is None else math.ceil(cpu_millis * 1000)
            ),
            rc.state_dir,
            topology,
            gates,
            pods,
            sources_ready,
        )
    with _refused("start memory manager error: "):
        memory = new_memory_manager(
            cfg.memory_manager_policy,
            rc.machine,
            reservation,
            cfg.reserved_memory,
            rc.state_dir,
            topology,
            pods,
            sources_ready,
            gates.enabled("PodLevelResources"),
        )
    topology.add_hint_provider(cpu)
    topology.add_hint_provider(memory)
    return ResourceManagers(
        topology, cpu, memory, gates.enabled("DisableCPUQuotaWithExclusiveCPUs")
    )
