"""The memory manager's state and its checkpoint file `memory_manager_state`
(pkg/kubelet/cm/memorymanager/state).

The machine state holds, per NUMA node, each memory type's (memory,
hugepages-<size>) total, system-reserved, allocatable, reserved and free bytes,
how many allocations use the node and which group of nodes ("cells") it is
allocated together with. The entries hold each container's memory blocks.
Written through to the file in upstream's JSON format with its checksum.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from kubelet.checkpointmanager import (
    CheckpointError,
    CheckpointStore,
    check_policy,
    clean_string,
    go_int,
    go_list,
    go_map,
    go_object,
    go_string,
    go_uint,
    load_json,
    restore_checkpoint,
    struct_fields,
)
from kubelet.checkpointmanager import (
    CorruptCheckpointError as CorruptCheckpointError,
)
from kubelet.checkpointmanager.checksum import (
    GoMap,
    GoPtr,
    GoScalar,
    GoSlice,
    GoStruct,
    GoValue,
    checksum,
)

log = logging.getLogger(__name__)

STATE_FILE = "memory_manager_state"


@dataclass
class MemoryTable:
    total: int = 0
    system_reserved: int = 0
    allocatable: int = 0
    reserved: int = 0
    free: int = 0


@dataclass
class NUMANodeState:
    number_of_assignments: int = 0
    # None stands for JSON null (a nil Go map or slice), which hashes differently.
    memory_map: dict[str, MemoryTable | None] | None = field(default_factory=dict)
    cells: list[int] | None = field(default_factory=list)


@dataclass
class Block:
    numa_affinity: list[int] | None
    type: str
    size: int


MachineState = dict[int, NUMANodeState | None]
Assignments = dict[str, dict[str, list[Block] | None] | None]


@dataclass
class Checkpoint:
    policy_name: str = ""
    machine_state: MachineState | None = field(default_factory=dict)
    entries: Assignments | None = field(default_factory=dict)
    checksum: int = 0


# ---------------------------------------------------------------- Go values


def _ints(v: list[int] | None) -> GoSlice:
    return GoSlice("[]int", None if v is None else tuple(GoScalar("int", i) for i in v))


def _table(t: MemoryTable | None) -> GoPtr:
    fields = None if t is None else GoStruct(
        "state.MemoryTable",
        (
            ("TotalMemSize", GoScalar("uint64", t.total)),
            ("SystemReserved", GoScalar("uint64", t.system_reserved)),
            ("Allocatable", GoScalar("uint64", t.allocatable)),
            ("Reserved", GoScalar("uint64", t.reserved)),
            ("Free", GoScalar("uint64", t.free)),
        ),
    )  # fmt: skip
    return GoPtr("state.MemoryTable", fields)


def _node(n: NUMANodeState | None) -> GoPtr:
    if n is None:
        return GoPtr("state.NUMANodeState", None)
    mm = None if n.memory_map is None else tuple(
        (GoScalar("v1.ResourceName", k), _table(t)) for k, t in n.memory_map.items()
    )  # fmt: skip
    return GoPtr(
        "state.NUMANodeState",
        GoStruct(
            "state.NUMANodeState",
            (
                ("NumberOfAssignments", GoScalar("int", n.number_of_assignments)),
                ("MemoryMap", GoMap("map[v1.ResourceName]*state.MemoryTable", mm)),
                ("Cells", _ints(n.cells)),
            ),
        ),
    )


def _blocks(blocks: list[Block] | None) -> GoSlice:
    items = None if blocks is None else tuple(
        GoStruct(
            "state.Block",
            (
                ("NUMAAffinity", _ints(b.numa_affinity)),
                ("Type", GoScalar("v1.ResourceName", b.type)),
                ("Size", GoScalar("uint64", b.size)),
            ),
        )
        for b in blocks
    )  # fmt: skip
    return GoSlice("[]state.Block", items)


def go_value(cp: Checkpoint) -> GoValue:
    ms = None if cp.machine_state is None else tuple(
        (GoScalar("int", k), _node(n)) for k, n in cp.machine_state.items()
    )  # fmt: skip
    entries = None if cp.entries is None else tuple(
        (
            GoScalar("string", pod),
            GoMap(
                "map[string][]state.Block",
                None if c is None
                else tuple((GoScalar("string", name), _blocks(b)) for name, b in c.items()),
            ),
        )
        for pod, c in cp.entries.items()
    )  # fmt: skip
    return GoPtr(
        "state.MemoryManagerCheckpoint",
        GoStruct(
            "state.MemoryManagerCheckpoint",
            (
                ("PolicyName", GoScalar("string", cp.policy_name)),
                ("MachineState", GoMap("state.NUMANodeMap", ms)),
                ("Entries", GoMap("state.ContainerMemoryAssignments", entries)),
                ("Checksum", GoScalar("checksum.Checksum", 0)),
            ),
        ),
    )


# --------------------------------------------------------------------- JSON


def _json_ints(v: list[int] | None) -> str:
    return go_list(None if v is None else [str(i) for i in v])


def _json_table(t: MemoryTable | None) -> str:
    if t is None:
        return "null"
    return go_object(
        [
            ("total", str(t.total)),
            ("systemReserved", str(t.system_reserved)),
            ("allocatable", str(t.allocatable)),
            ("reserved", str(t.reserved)),
            ("free", str(t.free)),
        ]
    )


def _json_node(n: NUMANodeState | None) -> str:
    if n is None:
        return "null"
    mm = None if n.memory_map is None else {k: _json_table(t) for k, t in n.memory_map.items()}
    return go_object(
        [
            ("numberOfAssignments", str(n.number_of_assignments)),
            ("memoryMap", go_map(mm)),
            ("cells", _json_ints(n.cells)),
        ]
    )


def _json_blocks(blocks: list[Block] | None) -> str:
    return go_list(
        None
        if blocks is None
        else [
            go_object(
                [
                    ("numaAffinity", _json_ints(b.numa_affinity)),
                    ("type", go_string(b.type)),
                    ("size", str(b.size)),
                ]
            )
            for b in blocks
        ]
    )


def encode(cp: Checkpoint) -> bytes:
    cp.checksum = checksum(go_value(cp))
    ms = None if cp.machine_state is None else {
        str(k): _json_node(n) for k, n in cp.machine_state.items()
    }  # fmt: skip
    parts = [("policyName", go_string(cp.policy_name)), ("machineState", go_map(ms))]
    if cp.entries:  # omitempty
        parts.append(
            (
                "entries",
                go_map(
                    {
                        pod: go_map(
                            None if c is None else {n: _json_blocks(b) for n, b in c.items()}
                        )
                        for pod, c in cp.entries.items()
                    }
                ),
            )
        )
    parts.append(("checksum", str(cp.checksum)))
    return go_object(parts).encode()


def _list_of_ints(v: Any, where: str) -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise CheckpointError(f"{where}: want an array")
    return [go_int(i, where) for i in v]


def _decode_table(v: Any, where: str) -> MemoryTable | None:
    if v is None:
        return None
    f = struct_fields(v, ("total", "systemReserved", "allocatable", "reserved", "free"), where)
    t = MemoryTable()
    for key, attr in (
        ("total", "total"),
        ("systemReserved", "system_reserved"),
        ("allocatable", "allocatable"),
        ("reserved", "reserved"),
        ("free", "free"),
    ):
        if f.get(key) is not None:
            setattr(t, attr, go_uint(f[key], f"{where}.{key}"))
    return t


def _decode_node(v: Any, where: str) -> NUMANodeState | None:
    if v is None:
        return None
    f = struct_fields(v, ("numberOfAssignments", "memoryMap", "cells"), where)
    n = NUMANodeState(memory_map=None, cells=None)
    if f.get("numberOfAssignments") is not None:
        n.number_of_assignments = go_int(f["numberOfAssignments"], where)
    mm = f.get("memoryMap")
    if mm is not None:
        if not isinstance(mm, dict):
            raise CheckpointError(f"{where}.memoryMap: want an object")
        n.memory_map = {
            clean_string(k, where): _decode_table(t, f"{where}[{k}]") for k, t in mm.items()
        }
    n.cells = _list_of_ints(f.get("cells"), f"{where}.cells")
    return n


def _decode_blocks(v: Any, where: str) -> list[Block] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise CheckpointError(f"{where}: want an array")
    out = []
    for item in v:
        f = struct_fields(item, ("numaAffinity", "type", "size"), where)
        out.append(
            Block(
                _list_of_ints(f.get("numaAffinity"), where),
                clean_string(f.get("type") or "", where),
                go_uint(f.get("size") or 0, where),
            )
        )
    return out


def _node_key(k: str) -> int:
    try:
        return int(k, 10)
    except ValueError:
        raise CheckpointError(f"machineState: NUMA node key {k!r} is not an integer") from None


def decode(blob: bytes) -> Checkpoint:
    raw = struct_fields(load_json(blob), ("policyName", "machineState", "entries", "checksum"), "")
    cp = Checkpoint()
    if raw.get("policyName") is not None:
        cp.policy_name = clean_string(raw["policyName"], "policyName")
    if raw.get("checksum") is not None:
        cp.checksum = go_uint(raw["checksum"], "checksum")
    if "machineState" in raw:
        ms = raw["machineState"]
        if ms is not None and not isinstance(ms, dict):
            raise CheckpointError("machineState: want an object")
        cp.machine_state = None if ms is None else {
            _node_key(k): _decode_node(n, f"machineState[{k}]") for k, n in ms.items()
        }  # fmt: skip
    if "entries" in raw:
        e = raw["entries"]
        if e is not None and not isinstance(e, dict):
            raise CheckpointError("entries: want an object")
        entries: Assignments | None = None
        if e is not None:
            entries = {}
            for pod, c in e.items():
                if c is not None and not isinstance(c, dict):
                    raise CheckpointError(f"entries[{pod}]: want an object")
                entries[clean_string(pod, "entries")] = None if c is None else {
                    clean_string(n, pod): _decode_blocks(b, f"entries[{pod}][{n}]")
                    for n, b in c.items()
                }  # fmt: skip
        cp.entries = entries
    got = checksum(go_value(cp))
    if got != cp.checksum:  # no "0 means no checksum" here, unlike the CPU manager
        raise CorruptCheckpointError(got, cp.checksum)
    return cp


# -------------------------------------------------------------------- state


class MemoryManagerState:
    """The state, written through to the checkpoint file when there is one.
    Readers get copies; writers replace, as upstream's state does."""

    def __init__(self, policy_name: str, store: CheckpointStore | None = None) -> None:
        self.policy_name = policy_name
        self.store = store
        self._machine: MachineState = {}
        self._assignments: dict[str, dict[str, list[Block]]] = {}

    @classmethod
    def restore(cls, store: CheckpointStore, policy_name: str) -> MemoryManagerState:
        st = cls(policy_name, store)

        def load(blob: bytes) -> None:
            cp = decode(blob)
            check_policy(policy_name, cp.policy_name, "[memorymanager] ")
            st._machine = cp.machine_state or {}
            st._assignments = {
                pod: {n: list(b or []) for n, b in (c or {}).items()}
                for pod, c in (cp.entries or {}).items()
            }

        if not restore_checkpoint(store, STATE_FILE, "memory manager", load):
            st._store()
        return st

    def _store(self) -> None:
        if self.store is None:
            return
        cp = Checkpoint(
            self.policy_name,
            copy.deepcopy(self._machine),
            {pod: dict(c) for pod, c in self._assignments.items()},
        )
        try:
            self.store.write(STATE_FILE, encode(cp))
        except OSError as err:
            log.error("Failed to store the memory manager checkpoint: %s", err)

    def get_machine_state(self) -> MachineState:
        return copy.deepcopy(self._machine)

    def get_memory_blocks(self, pod_uid: str, container: str) -> list[Block] | None:
        blocks = self._assignments.get(pod_uid, {}).get(container)
        return None if blocks is None else copy.deepcopy(blocks)

    def get_assignments(self) -> dict[str, dict[str, list[Block]]]:
        return copy.deepcopy(self._assignments)

    def set_machine_state(self, machine: MachineState) -> None:
        self._machine = copy.deepcopy(machine)
        self._store()

    def set_memory_blocks(self, pod_uid: str, container: str, blocks: list[Block]) -> None:
        self._assignments.setdefault(pod_uid, {})[container] = copy.deepcopy(blocks)
        self._store()

    def delete(self, pod_uid: str, container: str) -> None:
        per_pod = self._assignments.get(pod_uid)
        if per_pod is None:
            return
        per_pod.pop(container, None)
        if not per_pod:
            del self._assignments[pod_uid]
        self._store()
