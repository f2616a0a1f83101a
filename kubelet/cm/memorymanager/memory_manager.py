"""The memory manager (pkg/kubelet/cm/memorymanager/memory_manager.go).

Policy "None" does nothing. Policy "Static" reserves the memory of Guaranteed
pods' containers on NUMA nodes chosen with the topology manager and pins the
containers there (cpuset.mems). It needs reservedMemory per NUMA node adding
up, for each memory type, to what node allocatable reserves (kube-reserved +
system-reserved + the hard eviction threshold for memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from kubelet.checkpointmanager import CheckpointStore
from kubelet.cm.containermap import ContainerMap
from kubelet.cm.interfaces import PodLookup, stale_refs
from kubelet.cm.memorymanager.policy_static import Hints, StaticPolicy, is_memory_resource
from kubelet.cm.memorymanager.state import Block, MemoryManagerState
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.topologymanager.topology_manager import Store
from kubelet.types import Container, Pod, uid
from kubelet.util.quantity import format_binary, parse_quantity

log = logging.getLogger(__name__)

POLICY_NONE = "None"
POLICY_STATIC = "Static"


def _format_quantity(v: Decimal) -> str:
    """How resource.Quantity prints a byte count (binary suffix when exact)."""
    return format_binary(int(v)) if int(v) == v else str(v)


def reserved_by_numa(
    machine: MachineTopology,
    node_reservation: Mapping[str, Decimal],
    reservations: Sequence[Mapping[str, Any]],
) -> dict[int, dict[str, int]]:
    """validateReservedMemory + convertReserved: ValueError unless, per memory
    type, the reservations add up to node allocatable's reservation."""
    nodes = {n.id for n in machine.nodes}
    totals: dict[str, Decimal] = {}
    out: dict[int, dict[str, int]] = {n: {} for n in nodes}
    for r in reservations:
        numa = int(r.get("numaNode", 0))
        if numa not in nodes:
            raise ValueError(
                f"the reserved memory configuration references a NUMA node {numa} that does "
                "not exist on this machine"
            )
        for name, q in (r.get("limits") or {}).items():
            amount = parse_quantity(q)
            totals[name] = totals.get(name, Decimal(0)) + amount
            out[numa][name] = int(amount)
    kinds = set(totals) | {k for k in node_reservation if is_memory_resource(k)}
    for kind in sorted(kinds):
        want = node_reservation.get(kind, Decimal(0))
        got = totals.get(kind, Decimal(0))
        if want != got:
            raise ValueError(
                f'the total amount "{_format_quantity(got)}" of type "{kind}" is not equal to the '
                f'value "{_format_quantity(want)}" determined by Node Allocatable feature'
            )
    return out


class MemoryManager:
    def __init__(
        self,
        policy: StaticPolicy | None,
        state: MemoryManagerState,
        pods: PodLookup,
        sources_ready: Callable[[], bool],
    ) -> None:
        self.policy = policy
        self.state = state
        self.pods = pods
        self.sources_ready = sources_ready
        self.containers = ContainerMap()
        # GetAllocatableMemory: per NUMA node and type, fixed at start as upstream.
        self._allocatable = policy.allocatable_memory(state) if policy is not None else []

    def allocate(self, pod: Pod, c: Container) -> None:
        if self.policy is None:
            return
        self.remove_stale_state()
        self.policy.allocate(self.state, pod, c)

    def get_topology_hints(self, pod: Pod, c: Container) -> Hints | None:
        if self.policy is None:
            return None
        self.remove_stale_state()
        return self.policy.get_topology_hints(self.state, pod, c)

    def get_pod_topology_hints(self, pod: Pod) -> Hints | None:
        if self.policy is None:
            return None
        self.remove_stale_state()
        return self.policy.get_pod_topology_hints(self.state, pod)

    def memory_numa_nodes(self, pod_uid: str, name: str) -> list[int]:
        """GetMemoryNUMANodes: the nodes of the container's blocks (for cpuset.mems)."""
        nodes: set[int] = set()
        for b in self.state.get_memory_blocks(pod_uid, name) or []:
            nodes.update(b.numa_affinity or [])
        return sorted(nodes)

    def memory_blocks(self, pod_uid: str, name: str) -> list[Block]:
        return self.state.get_memory_blocks(pod_uid, name) or []

    def allocatable_memory(self) -> list[Block]:
        return list(self._allocatable)

    def add_container(self, pod: Pod, c: Container, container_id: str) -> None:
        """An app container runs: the regular init containers before it are done
        with their memory."""
        if self.policy is None:
            return
        self.containers.add(uid(pod), c["name"], container_id)
        for init in (pod.get("spec") or {}).get("initContainers") or []:
            if init.get("name") == c["name"]:
                break
            if init.get("restartPolicy") == "Always":
                continue
            self._remove_by_ref(uid(pod), init["name"])

    def remove_container(self, container_id: str) -> None:
        ref = self.containers.get_container_ref(container_id)
        if ref is not None and self.policy is not None:
            self._remove_by_ref(*ref)

    def _remove_by_ref(self, pod_uid: str, name: str) -> None:
        assert self.policy is not None
        self.policy.remove_container(self.state, pod_uid, name)
        self.containers.remove_by_container_ref(pod_uid, name)

    def remove_stale_state(self) -> None:
        if self.policy is None or not self.sources_ready():
            return
        held = [(p, n) for p, names in self.state.get_assignments().items() for n in names]
        for pod_uid, name in stale_refs([*held, *self.containers.refs()], self.pods):
            log.info("Releasing the memory of %s/%s: no longer active", pod_uid, name)
            self._remove_by_ref(pod_uid, name)


def new_memory_manager(
    policy_name: str,
    machine: MachineTopology,
    node_reservation: Mapping[str, Decimal],
    reservations: Sequence[Mapping[str, Any]],
    state_dir: str,
    affinity: Store,
    pods: PodLookup,
    sources_ready: Callable[[], bool],
    pod_level_resources: bool = True,
) -> MemoryManager:
    """NewManager and Start: ValueError with upstream's message."""
    policy: StaticPolicy | None = None
    if policy_name == POLICY_STATIC:
        reserved = reserved_by_numa(machine, node_reservation, reservations)
        policy = StaticPolicy(machine, reserved, affinity, pod_level_resources)
    elif policy_name != POLICY_NONE:
        raise ValueError(f'unknown policy: "{policy_name}"')
    state = MemoryManagerState.restore(CheckpointStore(state_dir), policy_name)
    if policy is not None:
        policy.start(state)
    log.info("Memory manager started with policy %s", policy_name)
    return MemoryManager(policy, state, pods, sources_ready)
