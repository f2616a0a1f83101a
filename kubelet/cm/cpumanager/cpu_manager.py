"""The CPU manager (pkg/kubelet/cm/cpumanager/cpu_manager.go).

Policy "none" does nothing: every container runs on all CPUs. Policy "static"
allocates exclusive CPUs at admission (through the topology manager), gives
them to the container as cpuset_cpus when it is created, and every
cpuManagerReconcilePeriod rewrites the cpuset of each running container whose
CPUs changed (UpdateContainerResources): that is how containers on the shared
pool shrink off CPUs handed out and grow back when they are released.
Allocations of pods that are no longer active are released before each
allocation and each reconcile (removeStaleState).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubelet.checkpointmanager import CheckpointStore
from kubelet.cm.containermap import ContainerMap
from kubelet.cm.cpumanager.policy_static import StaticPolicy, num_reserved_cpus
from kubelet.cm.cpumanager.state import CPUManagerState
from kubelet.cm.cpumanager.topology import CPUTopology
from kubelet.cm.interfaces import ContainerUpdater, PodLookup, stale_refs
from kubelet.cm.topologymanager.policy import ProviderHints
from kubelet.cm.topologymanager.topology_manager import Store
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import CRIError
from kubelet.features import FeatureGate
from kubelet.types import Container, Pod, uid
from kubelet.util.cpuset import EMPTY, CPUSet, format_cpus

log = logging.getLogger(__name__)

POLICY_NONE = "none"


class CPUManager:
    """Built by new_cpu_manager, which has already read and checked the state file."""

    def __init__(
        self,
        policy: StaticPolicy | None,
        state: CPUManagerState,
        reconcile_period: float,
        pods: PodLookup,
        sources_ready: Callable[[], bool],
    ) -> None:
        self.policy = policy  # None: the none policy
        self.policy_name = state.policy_name
        self.state = state
        self.reconcile_period = reconcile_period
        self.pods = pods
        self.sources_ready = sources_ready
        # What each running container was last given (lastUpdateState upstream).
        self.last_update: dict[tuple[str, str], CPUSet] = {}
        self.containers = ContainerMap()
        self.allocatable: CPUSet = policy.allocatable_cpus(state) if policy is not None else EMPTY

    async def run(self, stop: asyncio.Event, runtime: ContainerUpdater) -> None:
        """The reconcile loop (static policy only, as upstream)."""
        if self.policy is None:
            return
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.reconcile_period)
                return
            except TimeoutError:
                pass
            await self.reconcile(runtime)

    # ------------------------------------------------------------ providers
    def allocate(self, pod: Pod, c: Container) -> None:
        if self.policy is None:
            return
        self.remove_stale_state()
        self.policy.allocate(self.state, pod, c)

    def get_topology_hints(self, pod: Pod, c: Container) -> ProviderHints:
        if self.policy is None:
            return None
        self.remove_stale_state()
        return self.policy.get_topology_hints(self.state, pod, c)

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        if self.policy is None:
            return None
        self.remove_stale_state()
        return self.policy.get_pod_topology_hints(self.state, pod)

    # ----------------------------------------------------------- containers
    def cpu_affinity(self, pod_uid: str, name: str) -> CPUSet:
        """GetCPUAffinity: the container's own CPUs, else the shared pool."""
        return self.state.get_cpuset_or_default(pod_uid, name)

    def exclusive_cpus(self, pod_uid: str, name: str) -> CPUSet:
        return self.state.get_cpuset(pod_uid, name) or EMPTY

    def allocatable_cpus(self) -> CPUSet:
        """GetAllocatableCPUs: all CPUs but the reserved ones (static), none otherwise."""
        return self.allocatable

    def add_container(self, pod: Pod, c: Container, container_id: str) -> None:
        """The container was created with cpu_affinity(): remember what it has."""
        if self.policy is None:
            return
        cpus = self.state.get_cpuset(uid(pod), c["name"])
        if cpus is not None:
            self.last_update[(uid(pod), c["name"])] = cpus
        self.containers.add(uid(pod), c["name"], container_id)

    def remove_container(self, container_id: str) -> None:
        ref = self.containers.get_container_ref(container_id)
        if ref is None or self.policy is None:
            return
        self._remove_by_ref(*ref)

    def _remove_by_ref(self, pod_uid: str, name: str) -> None:
        assert self.policy is not None
        self.policy.remove_container(self.state, pod_uid, name)
        self.last_update.pop((pod_uid, name), None)
        self.containers.remove_by_container_ref(pod_uid, name)

    def remove_stale_state(self) -> None:
        """Release what containers of pods no longer active hold; only once
        every pod source has spoken (before, a pod may just not be known yet)."""
        if self.policy is None or not self.sources_ready():
            return
        held = [(p, n) for p, names in self.state.get_assignments().items() for n in names]
        for pod_uid, name in stale_refs([*held, *self.containers.refs()], self.pods):
            log.info("Releasing the CPUs of %s/%s: no longer active", pod_uid, name)
            self._remove_by_ref(pod_uid, name)

    async def reconcile(self, runtime: ContainerUpdater) -> list[tuple[str, str]]:
        """reconcileState: bring every running container's cpuset in line with
        the state; answers the (pod UID, container) pairs it updated."""
        self.remove_stale_state()
        updated: list[tuple[str, str]] = []
        for pod in self.pods.active_pods():
            pu = uid(pod)
            for rc in self.pods.running_containers(pu):
                self.containers.add(pu, rc.name, rc.container_id)
                cpus = self.state.get_cpuset_or_default(pu, rc.name)
                if not cpus or cpus == self.last_update.get((pu, rc.name)):
                    continue
                try:
                    await runtime.update_container_resources(
                        rc.container_id, pb.LinuxContainerResources(cpuset_cpus=format_cpus(cpus))
                    )
                except CRIError as err:  # this container only; retried next period
                    log.error(
                        "ReconcileState: failed to update container %s (%s/%s) to cpuset %s: %s",
                        rc.container_id, pu, rc.name, format_cpus(cpus), err,
                    )  # fmt: skip
                    continue
                self.last_update[(pu, rc.name)] = cpus
                updated.append((pu, rc.name))
        return updated


@dataclass(frozen=True)
class Reservation:
    """reservedSystemCPUs, and kube-reserved + system-reserved cpu (None: neither set)."""

    cpus: CPUSet = EMPTY
    cpu_millis: int | None = None


def new_cpu_manager(
    policy_name: str,
    options: Mapping[str, str],
    reconcile_period: float,
    topo: CPUTopology,
    reserved: Reservation,
    state_dir: str,
    affinity: Store,
    gates: FeatureGate,
    pods: PodLookup,
    sources_ready: Callable[[], bool],
) -> CPUManager:
    """NewManager and Start: ValueError with upstream's message for a setting it
    refuses and for a state file it cannot take over (another policy, other CPUs)."""
    policy = _new_policy(policy_name, options, topo, reserved, affinity, gates)
    state = CPUManagerState.restore(CheckpointStore(state_dir), policy_name, ContainerMap())
    if policy is not None:
        policy.start(state)
        policy.initialize_metrics(state)
    log.info("CPU manager started with policy %s", policy_name)
    return CPUManager(policy, state, reconcile_period, pods, sources_ready)


def _new_policy(
    policy_name: str,
    options: Mapping[str, str],
    topo: CPUTopology,
    reserved: Reservation,
    affinity: Store,
    gates: FeatureGate,
) -> StaticPolicy | None:
    if policy_name == POLICY_NONE:
        if options:
            opts = " ".join(f"{k}:{v}" for k, v in sorted(options.items()))
            raise ValueError(
                f"new none policy error: None policy: received unsupported options=map[{opts}]"
            )
        return None
    if policy_name != StaticPolicy.name:
        raise ValueError(f'unknown policy: "{policy_name}"')
    if reserved.cpu_millis is None:
        raise ValueError(
            "[cpumanager] unable to determine reserved CPU resources for static policy"
        )
    if reserved.cpu_millis == 0:
        raise ValueError(
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be "
            "greater than zero"
        )
    try:
        return StaticPolicy(
            topo,
            num_reserved_cpus(reserved.cpu_millis),
            reserved.cpus,
            affinity,
            dict(options),
            gates,
        )
    except ValueError as err:
        raise ValueError(f"new static policy error: {err}") from None
