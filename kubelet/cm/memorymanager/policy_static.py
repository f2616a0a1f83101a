"""The Static memory manager policy (pkg/kubelet/cm/memorymanager/policy_static.go).

Containers of Guaranteed pods get their memory (and hugepages) reserved on a
NUMA node, or on a group of nodes that is then only ever allocated as a whole;
the container's cpuset.mems is set to those nodes. Init containers' memory is
reused by the app containers that follow them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kubelet.cm import metrics
from kubelet.cm.cpumanager.policy_static import pod_level_resources_set
from kubelet.cm.memorymanager.state import (
    Block,
    MachineState,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
)
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import TopologyHint
from kubelet.cm.topologymanager.topology_manager import (
    AdmissionError,
    Store,
    init_and_app_containers,
)
from kubelet.types import Container, Pod, qos_class, uid
from kubelet.util.quantity import format_binary, to_bytes

log = logging.getLogger(__name__)

POLICY_STATIC = "Static"
Hints = dict[str, list[TopologyHint]]
# NUMA node -> resource name -> bytes reserved for the system
SystemReserved = Mapping[int, Mapping[str, int]]


class MemoryAllocationError(AdmissionError):
    pass


def hugepage_resource_name(page_size_kb: int) -> str:
    """hugepages-2Mi, hugepages-1Gi (as the API's HugePageResourceName formats a size)."""
    return f"hugepages-{format_binary(page_size_kb * 1024)}"


def is_memory_resource(name: str) -> bool:
    return name == "memory" or name.startswith("hugepages-")


def requested_resources(c: Container) -> dict[str, int]:
    res = c.get("resources") or {}
    req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: to_bytes(v) for k, v in req.items() if is_memory_resource(k)}


def is_restartable_init(c: Container) -> bool:
    return c.get("restartPolicy") == "Always"


def pod_requested_resources(pod: Pod) -> dict[str, int]:
    spec = pod.get("spec") or {}
    by_init: dict[str, int] = {}
    by_restartable: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        for name, qty in requested_resources(c).items():
            by_init.setdefault(name, 0)
            if is_restartable_init(c):
                by_restartable[name] = by_restartable.get(name, 0) + qty
            elif by_restartable.get(name, 0) + qty > by_init[name]:
                by_init[name] = by_restartable.get(name, 0) + qty
    by_app: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, qty in requested_resources(c).items():
            by_app[name] = by_app.get(name, 0) + qty
    return {
        name: max(total + by_restartable.get(name, 0), by_init.get(name, 0))
        for name, total in by_app.items()
    }


def find_best_hint(hints: list[TopologyHint]) -> TopologyHint:
    best: TopologyHint | None = None
    for h in hints:
        if best is None:
            best = h
        elif h.preferred and not best.preferred:
            best = h
        elif h.preferred == best.preferred:
            assert h.numa_affinity is not None and best.numa_affinity is not None
            if bitmask.is_narrower_than(h.numa_affinity, best.numa_affinity):
                best = h
    return best if best is not None else TopologyHint(None, False)


def is_hint_in_group(hint: list[int], group: list[int]) -> bool:
    return set(hint) <= set(group)


class StaticPolicy:
    name = POLICY_STATIC

    def __init__(
        self,
        machine: MachineTopology,
        reserved: SystemReserved,
        affinity: Store,
        pod_level_resources: bool = True,
    ) -> None:
        if sum(r.get("memory", 0) for r in reserved.values()) <= 0:
            raise ValueError("[memorymanager] you should specify the system reserved memory")
        # PodLevelResources: pods with pod-level resources are left out.
        self.pod_level_resources = pod_level_resources
        self.machine = machine
        self.reserved = reserved
        self.affinity = affinity
        # pod UID -> NUMA mask -> resource -> bytes its init containers freed up
        self.reusable: dict[str, dict[int, dict[str, int]]] = {}

    def _pod_level(self, pod: Pod) -> bool:
        return self.pod_level_resources and pod_level_resources_set(pod)

    # -------------------------------------------------------------- state
    def default_machine_state(self) -> MachineState:
        out: MachineState = {}
        for node in self.machine.nodes:
            st = NUMANodeState(0, {}, [node.id])
            assert st.memory_map is not None
            hugepages_total = 0
            for hp in node.hugepages:
                name = hugepage_resource_name(hp.page_size_kb)
                total = hp.num_pages * hp.page_size_kb * 1024
                reserved = self.reserved.get(node.id, {}).get(name, 0)
                st.memory_map[name] = MemoryTable(
                    total, reserved, total - reserved, 0, total - reserved
                )
                hugepages_total += total
            reserved = self.reserved.get(node.id, {}).get("memory", 0)
            allocatable = node.memory - reserved - hugepages_total
            st.memory_map["memory"] = MemoryTable(
                node.memory, reserved, allocatable, 0, allocatable
            )
            out[node.id] = st
        return out

    def start(self, s: MemoryManagerState) -> None:
        """validateState: the stored machine state must be what the machine, the
        reservation and the stored assignments add up to."""
        machine = s.get_machine_state()
        assignments = s.get_assignments()
        if not machine:
            if assignments:
                raise ValueError(
                    "[memorymanager] machine state can not be empty when it has memory assignments"
                )
            s.set_machine_state(self.default_machine_state())
            return
        expected = self.default_machine_state()
        for pod, containers in assignments.items():
            for name, blocks in containers.items():
                for b in blocks:
                    _replay_block(expected, b, pod, name)
        if not machine_states_equal(machine, expected):
            raise ValueError(
                "[memorymanager] the expected machine state is different from the real one"
            )

    def allocatable_memory(self, s: MemoryManagerState) -> list[Block]:
        out = []
        for node_id, st in s.get_machine_state().items():
            for name, table in ((st.memory_map if st else None) or {}).items():
                if table is not None and table.allocatable:
                    out.append(Block([node_id], name, table.allocatable))
        return out

    # --------------------------------------------------------- allocation
    def allocate(self, s: MemoryManagerState, pod: Pod, c: Container) -> None:
        if qos_class(pod) != "Guaranteed" or self._pod_level(pod):
            return
        metrics.MEMORY_MANAGER_PINNING_REQUESTS.inc()
        done = False
        try:
            self._allocate(s, pod, c)
            done = True
        finally:
            if not done:
                metrics.MEMORY_MANAGER_PINNING_ERRORS.inc()

    def _allocate(self, s: MemoryManagerState, pod: Pod, c: Container) -> None:
        pu = uid(pod)
        existing = s.get_memory_blocks(pu, c["name"])
        if existing is not None:
            self._update_reusable(pod, c, existing)
            return
        hint = self.affinity.get_affinity(pu, c["name"])
        requested = requested_resources(c)
        machine = s.get_machine_state()
        best = hint
        if hint.numa_affinity is None:
            default = self._default_hint(machine, pod, requested)
            if not default.preferred and best.preferred:
                raise MemoryAllocationError(
                    "[memorymanager] failed to find the default preferred hint"
                )
            best = default
        if best.numa_affinity is None:  # hugepages but no memory requested: no default
            raise MemoryAllocationError(
                "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with "
                "enough memory is available"
            )
        if not _affinity_satisfies(machine, best.numa_affinity, requested):
            extended = self._extend_hint(machine, pod, requested, best.numa_affinity)
            if not extended.preferred and best.preferred:
                raise MemoryAllocationError(
                    "[memorymanager] failed to find the extended preferred hint"
                )
            best = extended
        assert best.numa_affinity is not None
        if _violates_numa_allocations(machine, best.numa_affinity):
            raise MemoryAllocationError(
                "[memorymanager] preferred hint violates NUMA node allocation"
            )
        bits = bitmask.get_bits(best.numa_affinity)
        blocks = []
        for name, size in requested.items():
            blocks.append(Block(list(bits), name, size))
            reusable = self.reusable.get(pu, {}).get(best.numa_affinity, {}).get(name, 0)
            _reserve(machine, bits, name, 0 if reusable >= size else size - reusable)
        self._update_reusable(pod, c, blocks)
        s.set_machine_state(machine)
        s.set_memory_blocks(pu, c["name"], blocks)
        self._shrink_init_blocks(s, pod, c, blocks)

    def remove_container(self, s: MemoryManagerState, pod_uid: str, name: str) -> None:
        blocks = s.get_memory_blocks(pod_uid, name)
        if blocks is None:
            return
        s.delete(pod_uid, name)
        machine = s.get_machine_state()
        for b in blocks:
            released = b.size
            for node_id in b.numa_affinity or []:
                st = machine[node_id]
                assert st is not None and st.memory_map is not None
                st.number_of_assignments -= 1
                if st.number_of_assignments == 0:
                    st.cells = [node_id]
                if released == 0:
                    continue
                t = st.memory_map[b.type]
                assert t is not None
                if t.reserved == 0:
                    continue
                if t.reserved < released:
                    released -= t.reserved
                    t.free += t.reserved
                    t.reserved = 0
                    continue
                t.free += released
                t.reserved -= released
                released = 0
        s.set_machine_state(machine)

    # -------------------------------------------------------------- hints
    def get_topology_hints(self, s: MemoryManagerState, pod: Pod, c: Container) -> Hints | None:
        if qos_class(pod) != "Guaranteed" or self._pod_level(pod):
            return None
        requested = requested_resources(c)
        blocks = s.get_memory_blocks(uid(pod), c["name"])
        if blocks is not None:
            return regenerate_hints(blocks, requested)
        return self.calculate_hints(s.get_machine_state(), pod, requested)

    def get_pod_topology_hints(self, s: MemoryManagerState, pod: Pod) -> Hints | None:
        if qos_class(pod) != "Guaranteed" or self._pod_level(pod):
            return None
        requested = pod_requested_resources(pod)
        for c in init_and_app_containers(pod):
            blocks = s.get_memory_blocks(uid(pod), c["name"])
            if blocks is not None:
                return regenerate_hints(blocks, requested)
        return self.calculate_hints(s.get_machine_state(), pod, requested)

    def calculate_hints(self, machine: MachineState, pod: Pod, requested: dict[str, int]) -> Hints:
        nodes = sorted(machine)
        min_size = len(nodes)
        hints: Hints = {}

        def visit(mask: int) -> None:
            nonlocal min_size
            bits = bitmask.get_bits(mask)
            single = len(bits) == 1
            free = {r: sum(_table(machine, n, r).free for n in bits) for r in requested}
            allocatable = {
                r: sum(_table(machine, n, r).allocatable for n in bits) for r in requested
            }
            if any(allocatable[r] < size for r, size in requested.items()):
                return
            min_size = min(min_size, mask.bit_count())
            st0 = machine[bits[0]]
            if single and st0 is not None and len(st0.cells or []) > 1:
                return  # the node belongs to a group
            for n in bits:
                st = machine[n]
                assert st is not None
                if not single and st.number_of_assignments > 0:
                    if len(st.cells or []) == 1 or sorted(st.cells or []) != sorted(bits):
                        return
            for r, size in requested.items():
                if free[r] + self.reusable.get(uid(pod), {}).get(mask, {}).get(r, 0) < size:
                    return
            for r in requested:
                hints.setdefault(r, []).append(TopologyHint(mask, False))

        bitmask.iterate_bitmasks(nodes, visit)
        return {
            r: [
                TopologyHint(h.numa_affinity, (h.numa_affinity or 0).bit_count() == min_size)
                for h in hs
            ]
            for r, hs in hints.items()
        }

    def _default_hint(
        self, machine: MachineState, pod: Pod, requested: dict[str, int]
    ) -> TopologyHint:
        hints = self.calculate_hints(machine, pod, requested)
        if not hints:
            raise MemoryAllocationError(
                "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with "
                "enough memory is available"
            )
        return find_best_hint(hints.get("memory", []))

    def _extend_hint(
        self, machine: MachineState, pod: Pod, requested: dict[str, int], mask: int
    ) -> TopologyHint:
        hints = self.calculate_hints(machine, pod, requested)
        filtered = [
            h
            for h in hints.get("memory", [])
            if is_hint_in_group(bitmask.get_bits(mask), bitmask.get_bits(h.numa_affinity or 0))
        ]
        if not filtered:
            raise MemoryAllocationError(
                "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
            )
        return find_best_hint(filtered)

    # ------------------------------------------------------ init containers
    def _update_reusable(self, pod: Pod, c: Container, blocks: list[Block]) -> None:
        pu = uid(pod)
        self.reusable = {pu: self.reusable[pu]} if pu in self.reusable else {}
        if _is_regular_init(pod, c):
            per_pod = self.reusable.setdefault(pu, {})
            for b in blocks:
                per_mask = per_pod.setdefault(bitmask.new_bitmask(b.numa_affinity or []), {})
                if b.size > per_mask.get(b.type, 0):
                    per_mask[b.type] = b.size
            return
        for b in blocks:
            mask = bitmask.new_bitmask(b.numa_affinity or [])
            have = self.reusable.get(pu, {}).get(mask, {}).get(b.type, 0)
            if have:
                self.reusable[pu][mask][b.type] = 0 if b.size >= have else have - b.size

    def _shrink_init_blocks(
        self, s: MemoryManagerState, pod: Pod, c: Container, blocks: list[Block]
    ) -> None:
        """The memory an app container reuses is no longer counted for the init containers before it."""
        pu = uid(pod)
        for block in blocks:
            size = block.size
            for init in (pod.get("spec") or {}).get("initContainers") or []:
                if init.get("name") == c["name"] or size == 0:
                    break
                if is_restartable_init(init):
                    continue
                init_blocks = s.get_memory_blocks(pu, init["name"])
                if not init_blocks:
                    continue
                for ib in init_blocks:
                    if ib.size == 0 or ib.type != block.type:
                        continue
                    if bitmask.new_bitmask(ib.numa_affinity or []) != bitmask.new_bitmask(
                        block.numa_affinity or []
                    ):
                        continue
                    if ib.size > size:
                        ib.size -= size
                        size = 0
                    else:
                        size -= ib.size
                        ib.size = 0
                s.set_memory_blocks(pu, init["name"], init_blocks)


def _is_regular_init(pod: Pod, c: Container) -> bool:
    for init in (pod.get("spec") or {}).get("initContainers") or []:
        if init.get("name") == c["name"]:
            return not is_restartable_init(init)
    return False


def _table(machine: MachineState, node: int, resource: str) -> MemoryTable:
    st = machine[node]
    t = (st.memory_map or {}).get(resource) if st is not None else None
    return t if t is not None else MemoryTable()


def _affinity_satisfies(machine: MachineState, mask: int, requested: dict[str, int]) -> bool:
    bits = bitmask.get_bits(mask)
    return all(
        sum(_table(machine, n, r).free for n in bits) >= size for r, size in requested.items()
    )


def _violates_numa_allocations(machine: MachineState, mask: int) -> bool:
    bits = bitmask.get_bits(mask)
    if len(bits) == 1:
        return False
    for n in bits:
        st = machine[n]
        assert st is not None
        if st.number_of_assignments == 0:
            continue
        if len(st.cells or []) == 1 or sorted(st.cells or []) != sorted(bits):
            return True
    return False


def _take_free(t: MemoryTable, size: int) -> int:
    """Move up to `size` free bytes to reserved; answers what is still to place."""
    taken = min(max(t.free, 0), size)
    t.reserved += taken
    t.free -= taken
    return size - taken


def _reserve(machine: MachineState, bits: list[int], resource: str, size: int) -> None:
    """updateMachineState: count the assignment on every node, take the bytes in node order."""
    for n in bits:
        st = machine[n]
        assert st is not None and st.memory_map is not None
        st.number_of_assignments += 1
        st.cells = list(bits)
        t = st.memory_map.get(resource)
        if t is not None:
            size = _take_free(t, size)


def _replay_block(machine: MachineState, b: Block, pod: str, name: str) -> None:
    size = b.size
    for n in b.numa_affinity or []:
        st = machine.get(n)
        if st is None:
            raise ValueError(
                f"[memorymanager] (pod: {pod}, container: {name}) the memory assignment uses the "
                "NUMA that does not exist"
            )
        st.number_of_assignments += 1
        st.cells = list(b.numa_affinity or [])
        t = (st.memory_map or {}).get(b.type)
        if t is None:
            raise ValueError(
                f"[memorymanager] (pod: {pod}, container: {name}) the memory assignment uses "
                "memory resource that does not exist"
            )
        size = _take_free(t, size)


def machine_states_equal(a: MachineState, b: MachineState) -> bool:
    if set(a) != set(b):
        return False
    for n, sa in a.items():
        sb = b[n]
        if sa is None or sb is None:
            return sa is sb
        if sa.number_of_assignments != sb.number_of_assignments:
            return False
        if sorted(sa.cells or []) != sorted(sb.cells or []):
            return False
        ma, mb = sa.memory_map or {}, sb.memory_map or {}
        if set(ma) != set(mb):
            return False
        for r, ta in ma.items():
            tb = mb[r]
            if ta is None or tb is None:
                return False
            if (ta.total, ta.system_reserved, ta.allocatable) != (
                tb.total,
                tb.system_reserved,
                tb.allocatable,
            ):
                return False
            # Free and reserved may be spread differently over a group: compare their sums.
            cells = sa.cells or []
            sums_a = [
                sum(_table(a, c, r).free for c in cells),
                sum(_table(a, c, r).reserved for c in cells),
            ]
            sums_b = [
                sum(_table(b, c, r).free for c in cells),
                sum(_table(b, c, r).reserved for c in cells),
            ]
            if sums_a != sums_b:
                return False
    return True


def regenerate_hints(blocks: list[Block], requested: dict[str, int]) -> Hints | None:
    """Hints from what is already allocated (a kubelet restart re-admits running pods)."""
    if len(blocks) != len(requested):
        return None
    hints: Hints = {r: [] for r in requested}
    for b in blocks:
        if b.type not in requested or b.size != requested[b.type]:
            return None
        hints[b.type].append(TopologyHint(bitmask.new_bitmask(b.numa_affinity or []), True))
    return hints
