"""The resource managers of the container manager (pkg/kubelet/cm/container_manager_linux.go):
the topology manager with the CPU and memory managers as its hint providers,
and the narrow interface the runtime manager calls when it creates and removes
containers (InternalContainerLifecycle upstream).

Admission (the topology manager's admit handler) allocates; creating a
container reads the allocation (cpuset_cpus, cpuset_mems); the CPU manager's
reconcile loop keeps running containers' cpusets in line with the shared pool.
They are built once the kubelet can tell its active pods (upstream binds them
in ContainerManager.Start), with the node allocatable reservation of the
ContainerManager (GetNodeAllocatableReservation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal

from kubelet.apis.config import KubeletConfiguration
from kubelet.client.rest import APIClient
from kubelet.cm import node_container_manager as nac
from kubelet.cm.cpumanager.cpu_manager import CPUManager, Reservation, new_cpu_manager
from kubelet.cm.cpumanager.topology import CPUTopology
from kubelet.cm.cpumanager.topology import discover as discover_cpus
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.devicemanager.pod_devices import DeviceRunOptions
from kubelet.cm.dra.claiminfo import ClaimInfoCache
from kubelet.cm.dra.health import DRAHealth, merge_statuses
from kubelet.cm.dra.healthinfo import HealthCache
from kubelet.cm.dra.manager import DRAManager
from kubelet.cm.dra.plugin import DRAPluginManager, HealthStreamHandler
from kubelet.cm.interfaces import (
    ContainerManagerError,
    ContainerUpdater,
    CPUPinning,
    PodLookup,
)
from kubelet.cm.memorymanager.memory_manager import MemoryManager, new_memory_manager
from kubelet.cm.memorymanager.policy_static import hugepage_resource_name
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.topologymanager.topology_manager import (
    TopologyManager,
    init_and_app_containers,
    new_topology_manager,
)
from kubelet.cri.api import api_pb2 as cri
from kubelet.features import Feature, FeatureGate
from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Container, Pod, ResourceStatus, uid
from kubelet.util import cpuset
from kubelet.util.cpuset import format_cpus

log = logging.getLogger(__name__)


def apply_reserved_cpus(cfg: KubeletConfiguration, topo: CPUTopology) -> cpuset.CPUSet:
    """reservedSystemCPUs replaces kube- and system-reserved cpu with its size
    (as upstream's server.go does; applying it twice changes nothing)."""
    if not cfg.reserved_system_cpus:
        return cpuset.EMPTY
    try:
        reserved = cpuset.parse(cfg.reserved_system_cpus)
    except ValueError as err:
        raise ContainerManagerError(f"unable to parse reserved-cpus list: {err}") from None
    online = topo.details.cpus()
    if not reserved <= online:
        raise ContainerManagerError(
            f"reserved-cpus: {cfg.reserved_system_cpus} is not a subset of online-cpus: "
            f"{format_cpus(online)}"
        )
    if reserved:
        log.info("reservedSystemCPUs %s overrides the cpu of kubeReserved and systemReserved",
                 format_cpus(reserved))  # fmt: skip
        cfg.kube_reserved.pop("cpu", None)
        cfg.system_reserved["cpu"] = str(len(reserved))
    return reserved


def machine_capacity(machine: MachineTopology) -> nac.ResourceList:
    """cpu (millicores), memory and hugepages-* of a machine, as cadvisor's
    CapacityFromMachineInfo gives them."""
    cap: nac.ResourceList = {
        "cpu": 1000 * sum(len(c.threads) for n in machine.nodes for c in n.cores),
        "memory": sum(n.memory for n in machine.nodes),
    }
    for n in machine.nodes:
        for hp in n.hugepages:
            name = hugepage_resource_name(hp.page_size_kb)
            cap[name] = cap.get(name, 0) + hp.page_size_kb * 1024 * hp.num_pages
    return cap


def node_reservation(cfg: KubeletConfiguration, machine: MachineTopology) -> nac.ResourceList:
    """The node allocatable reservation without a ContainerManager (a kubelet
    built on its own, as tests do): from the config and the machine."""
    try:
        allocatable = nac.NodeAllocatableConfig.from_config(cfg)
    except ValueError as err:
        raise ContainerManagerError(f"kubeReserved/systemReserved failed to parse: {err}") from err
    return nac.reservation(allocatable, machine_capacity(machine))


@dataclass(frozen=True)
class ResourceManagerConfig:
    """What the managers are built from besides the KubeletConfiguration."""

    machine: MachineTopology
    # GetNodeAllocatableReservation: cpu in millicores, the rest in bytes.
    reservation: Mapping[str, int]
    state_dir: str  # the kubelet's root dir, where upstream keeps the state files
    reserved_cpus: cpuset.CPUSet


class ResourceManagers:
    """ContainerResourceManager for the runtime, admission for the kubelet."""

    def __init__(
        self,
        topology: TopologyManager,
        cpu: CPUManager,
        memory: MemoryManager,
        devices: DeviceManager,
        unlimited_quota_when_pinned: bool = True,
        dra: DRAManager | None = None,
        dra_health: DRAHealth | None = None,
    ) -> None:
        self.topology = topology
        self.cpu = cpu
        self.memory = memory
        self.devices = devices
        # None when DynamicResourceAllocation is off (the pod syncer then names
        # spec.resourceClaims as not implemented).
        self.dra = dra
        # ResourceHealthStatus with DRA: the health the drivers stream.
        self.dra_health = dra_health
        self.unlimited_quota_when_pinned = unlimited_quota_when_pinned

    def admit(self, pod: Pod) -> Rejection | None:
        """The topology manager's admit handler: TopologyAffinityError, or the
        providers' allocation errors (devices: UnexpectedAdmissionError)."""
        return self.topology.admit(pod)

    async def device_options(self, pod: Pod, container: Container) -> DeviceRunOptions:
        """Device plugin devices, then the CDI devices of its DRA claims
        (upstream appends DRA's to the device manager's); AllocationError or
        DRAError when they cannot be given."""
        opts = await self.devices.container_options(pod, container)
        if self.dra is not None:
            have = {d.name for d in opts.cdi_devices}
            for name in self.dra.container_cdi_devices(pod, container):
                if name not in have:
                    opts.cdi_devices.append(cri.CDIDevice(name=name))
        return opts

    def allocated_resources_status(self, pod: Pod, name: str) -> list[ResourceStatus]:
        """UpdateAllocatedResourcesStatus for a regular container: the health of
        its device plugin devices, then of its claims' devices."""
        out = self.devices.allocated_resources_status(uid(pod), name)
        if self.dra_health is None:
            return out
        for c in pod["spec"].get("containers") or []:
            if c["name"] == name:
                return merge_statuses(out, self.dra_health.container_status(pod, c))
        return out

    async def prepare_dynamic_resources(self, pod: Pod) -> None:
        """Before the pod's sandbox: its ResourceClaims prepared by their drivers."""
        if self.dra is not None:
            await self.dra.prepare_resources(pod)

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
        return any(
            self.cpu.exclusive_cpus(uid(pod), c["name"]) for c in init_and_app_containers(pod)
        )

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
        self.devices.remove_pod(pod_uid)

    async def run(self, stop: asyncio.Event, runtime: ContainerUpdater) -> None:
        """The device plugin registration server and the CPU manager's reconcile
        loop, until stop."""
        try:
            await self.devices.start()
        except (OSError, RuntimeError) as err:
            # Upstream refuses to start; here every other pod keeps being served
            # and the node has no device plugin resources. Said loudly.
            log.error("Device plugin registration server failed, no device plugin "
                      "can register: %s", err)  # fmt: skip
        dra = asyncio.ensure_future(self.dra.run(stop)) if self.dra is not None else None
        try:
            await self.cpu.run(stop, runtime)  # returns at once without a policy
            await stop.wait()
        finally:
            try:
                await self.devices.stop()
            finally:
                if dra is not None:
                    dra.cancel()
                    await asyncio.gather(dra, return_exceptions=True)


@dataclass(frozen=True)
class DRASetup:
    """DRA on: the claim info cache, built before the status manager (which
    asks it whether a pod's claims are still prepared), and the factory of the
    drivers' plugin manager, given the health handler when ResourceHealthStatus
    is on."""

    claims: ClaimInfoCache
    new_plugins: Callable[[HealthStreamHandler | None], DRAPluginManager]


def new_dra_claims(state_dir: str) -> ClaimInfoCache:
    """The claim info cache from its checkpoint; ContainerManagerError with
    upstream's message when the checkpoint is corrupt."""
    with _refused("start dra manager error: "):
        return ClaimInfoCache(state_dir)


def _no_sync(pod_uid: str) -> None:
    """No pod syncs to ask for (a kubelet built without its pod workers)."""


@contextlib.contextmanager
def _refused(prefix: str = "") -> Iterator[None]:
    """A ValueError from a manager's constructor is the kubelet's refusal to start."""
    try:
        yield
    except ValueError as err:
        raise ContainerManagerError(prefix + str(err)) from None


def _new_topology(
    cfg: KubeletConfiguration, machine: MachineTopology, gates: FeatureGate
) -> TopologyManager:
    options = cfg.topology_manager_policy_options
    if options and not gates.enabled(Feature.TopologyManagerPolicyOptions):
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
    dra: DRASetup | None = None,
    kube_client: APIClient | None = None,
    device_health_changed: Callable[[str], None] | None = None,
) -> ResourceManagers:
    """NewContainerManager's part and Start: ContainerManagerError with upstream's
    message, prefixed as the Go kubelet prefixes it, for anything it refuses.
    device_health_changed: asked to sync a pod whose devices' health changed
    (with ResourceHealthStatus on; upstream's device manager update channel)."""
    with _refused():
        topology = _new_topology(cfg, rc.machine, gates)
    with _refused("start cpu manager error: "):
        cpu = new_cpu_manager(
            cfg.cpu_manager_policy,
            cfg.cpu_manager_policy_options,
            cfg.cpu_manager_reconcile_period,
            discover_cpus(rc.machine),
            Reservation(rc.reserved_cpus, rc.reservation.get("cpu")),
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
            {k: Decimal(v) for k, v in rc.reservation.items()},
            cfg.reserved_memory,
            rc.state_dir,
            topology,
            pods,
            sources_ready,
            gates.enabled(Feature.PodLevelResources),
        )
    numa_nodes = [n.id for n in rc.machine.nodes]
    health = gates.enabled(Feature.ResourceHealthStatus)
    devices = DeviceManager(
        rc.state_dir, pods, sources_ready, numa_nodes=numa_nodes, affinity=topology,
        health_changed=device_health_changed if health else None,
    )  # fmt: skip
    # Upstream's order: devices, CPUs, memory (hints merge in any order, but
    # allocation, and so which error a pod gets, follows it).
    for provider in (devices, cpu, memory):
        topology.add_hint_provider(provider)
    dra_manager = dra_health = None
    if dra is not None:
        if health:
            # The drivers' NodeWatchResources streams, opened as they register.
            changed = device_health_changed or _no_sync
            dra_health = DRAHealth(HealthCache(rc.state_dir), dra.claims, changed)
        plugins = dra.new_plugins(dra_health)
        dra_manager = DRAManager(dra.claims, kube_client, plugins, pods, sources_ready)
    return ResourceManagers(
        topology, cpu, memory, devices,
        gates.enabled(Feature.DisableCPUQuotaWithExclusiveCPUs), dra_manager, dra_health,
    )  # fmt: skip
