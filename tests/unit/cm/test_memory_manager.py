"""The memory manager: reservedMemory validation, the Static policy's NUMA
placement, init-container reuse, and its state file."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kubelet.cm.memorymanager.memory_manager import new_memory_manager, reserved_by_numa
from kubelet.cm.memorymanager.policy_static import StaticPolicy, hugepage_resource_name
from kubelet.cm.memorymanager.state import MemoryManagerState
from kubelet.cm.sysinfo import Core, HugePages, MachineTopology, Node
from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import TopologyHint
from tests.unit.cm.fixtures import Affinity, GiB, machine, mem_pod, static
from tests.unit.cm.topologies import vectors


def test_reserved_memory_must_match_node_allocatable_reservation() -> None:
    m = machine()
    res = [
        {"numaNode": 0, "limits": {"memory": "600Mi"}},
        {"numaNode": 1, "limits": {"memory": "424Mi"}},
    ]
    assert reserved_by_numa(m, {"memory": Decimal(GiB)}, res) == {
        0: {"memory": 600 << 20},
        1: {"memory": 424 << 20},
    }
    with pytest.raises(ValueError) as err:
        reserved_by_numa(m, {"memory": Decimal(2 * GiB)}, res)
    assert str(err.value) == (
        'the total amount "1Gi" of type "memory" is not equal to the value "2Gi" '
        "determined by Node Allocatable feature"
    )
    with pytest.raises(ValueError, match="references a NUMA node 5 that does not exist"):
        reserved_by_numa(
            m, {"memory": Decimal(GiB)}, [{"numaNode": 5, "limits": {"memory": "1Gi"}}]
        )


def test_static_policy_needs_reserved_memory() -> None:
    with pytest.raises(ValueError, match="you should specify the system reserved memory"):
        StaticPolicy(machine(), {}, Affinity())


def test_default_machine_state_carves_hugepages_and_reservation() -> None:
    _, s = static()
    st = s.get_machine_state()
    mem0 = st[0].memory_map["memory"]  # type: ignore[index,union-attr]
    assert (mem0.total, mem0.system_reserved, mem0.allocatable) == (16 * GiB, GiB, 14 * GiB)
    hp = st[1].memory_map[hugepage_resource_name(2048)]  # type: ignore[index,union-attr]
    assert hugepage_resource_name(2048) == "hugepages-2Mi" and hp.total == GiB
    assert hugepage_resource_name(1 << 20) == "hugepages-1Gi"


def test_guaranteed_container_is_placed_on_the_narrowest_node() -> None:
    p, s = static()
    pod = mem_pod("u1", ("app", "2Gi", False))
    hints = p.get_topology_hints(s, pod, pod["spec"]["containers"][0])
    assert hints == {
        "memory": [
            TopologyHint(0b01, True), TopologyHint(0b10, True), TopologyHint(0b11, False),
        ]
    }  # fmt: skip
    p.allocate(s, pod, pod["spec"]["containers"][0])
    blocks = s.get_memory_blocks("u1", "app")
    assert blocks is not None and [(b.numa_affinity, b.type, b.size) for b in blocks] == [
        ([0], "memory", 2 * GiB)
    ]
    assert s.get_machine_state()[0].memory_map["memory"].free == 12 * GiB  # type: ignore[index,union-attr]
    p.remove_container(s, "u1", "app")
    assert s.get_machine_state()[0].memory_map["memory"].free == 14 * GiB  # type: ignore[index,union-attr]


def test_a_request_bigger_than_a_node_takes_a_group_that_stays_a_group() -> None:
    aff = Affinity()
    p, s = static(affinity=aff)
    big = mem_pod("u1", ("big", "20Gi", False))
    aff.hints[("u1", "big")] = TopologyHint(bitmask.new_bitmask([0]), False)
    p.allocate(s, big, big["spec"]["containers"][0])
    assert s.get_memory_blocks("u1", "big")[0].numa_affinity == [0, 1]  # type: ignore[index]
    st = s.get_machine_state()
    assert st[0].cells == [0, 1] and st[1].cells == [0, 1]  # type: ignore[union-attr]
    # A single-node hint is now impossible: the nodes are one group.
    small = mem_pod("u2", ("s", "1Gi", False))
    hints = p.get_topology_hints(s, small, small["spec"]["containers"][0])
    assert hints == {"memory": [TopologyHint(0b11, False)]}


def test_init_container_memory_is_reused_by_the_app_container() -> None:
    p, s = static()
    pod = mem_pod("u1", ("init", "4Gi", True), ("app", "3Gi", False))
    p.allocate(s, pod, pod["spec"]["initContainers"][0])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    # The app container's 3Gi come out of what the init container held.
    assert s.get_machine_state()[0].memory_map["memory"].reserved == 4 * GiB  # type: ignore[index,union-attr]
    assert s.get_memory_blocks("u1", "init")[0].size == GiB  # type: ignore[index]


def test_state_file_is_written_in_upstream_format_and_policy_change_refused(tmp_path: Path) -> None:
    class Pods:
        def active_pod(self, u: str) -> None:
            return None

        def active_pods(self) -> list[Any]:
            return []

        def running_containers(self, u: str) -> list[Any]:
            return []

    res = [{"numaNode": 0, "limits": {"memory": "1Gi"}}]
    mm = new_memory_manager("Static", machine(), {"memory": Decimal(GiB)}, res, str(tmp_path),
                            Affinity(), Pods(), lambda: True)  # fmt: skip
    pod = mem_pod("u1", ("app", "2Gi", False))
    mm.allocate(pod, pod["spec"]["containers"][0])
    assert mm.memory_numa_nodes("u1", "app") == [0]
    text = (tmp_path / "memory_manager_state").read_text()
    assert text.startswith('{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,')
    # Restarting reads it back and validates it against the machine.
    again = new_memory_manager("Static", machine(), {"memory": Decimal(GiB)}, res, str(tmp_path),
                               Affinity(), Pods(), lambda: True)  # fmt: skip
    assert again.memory_numa_nodes("u1", "app") == [0]
    with pytest.raises(ValueError) as err:
        new_memory_manager(
            "None", machine(), {}, [], str(tmp_path), Affinity(), Pods(), lambda: True
        )
    assert 'configured policy "None" differs from state checkpoint policy "Static"' in str(
        err.value
    )
    assert "please drain this node and delete the memory manager checkpoint file" in str(err.value)
    # Another machine (other memory) does not match the stored state.
    with pytest.raises(ValueError, match="expected machine state is different"):
        new_memory_manager("Static", machine(mem=8 * GiB), {"memory": Decimal(GiB)}, res,
                           str(tmp_path), Affinity(), Pods(), lambda: True)  # fmt: skip


def test_file_written_by_upstream_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / "memory_manager_state").write_text(
        vectors("memory_checkpoint.json")["upstreamFile"]
    )
    s = MemoryManagerState.restore(
        __import__("kubelet.checkpointmanager").checkpointmanager.CheckpointStore(str(tmp_path)),
        "Static",
    )
    blocks = s.get_memory_blocks("pod-a", "app")
    assert (
        blocks is not None and blocks[0].numa_affinity == [0, 1] and blocks[0].size == 18253611008
    )


def _vec_machine(m: dict[str, Any]) -> MachineTopology:
    nodes = [
        Node(i, [Core(i, 0, [i])], mem, [HugePages(2048, pages // 1 if pages else 0)], None)
        for i, (mem, pages) in enumerate(zip(m["nodes"], m["hugepages"], strict=True))
    ]
    return MachineTopology(nodes, len(nodes), 1)


def _machine_json(st: Any) -> dict[str, Any]:
    out = {}
    for n, ns in st.items():
        out[str(n)] = {
            "numberOfAssignments": ns.number_of_assignments,
            "memoryMap": {
                r: {
                    "total": t.total, "systemReserved": t.system_reserved,
                    "allocatable": t.allocatable, "reserved": t.reserved, "free": t.free,
                }
                for r, t in ns.memory_map.items()
            },
            "cells": ns.cells,
        }  # fmt: skip
    return out


def _vec_pod(uid: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"initContainers": [], "containers": []}
    for c in containers:
        res: dict[str, Any] = {"cpu": "1", "memory": str(c["memory"])}
        if c.get("hugepages"):
            res["hugepages-2Mi"] = str(c["hugepages"])
        ctr = {"name": c["name"], "resources": {"requests": res, "limits": res}}
        spec["initContainers" if c.get("init") else "containers"].append(ctr)
    return {"metadata": {"uid": uid}, "spec": spec}


def _by_type(blocks: list[dict[str, Any]] | None) -> Any:
    return None if blocks is None else sorted(blocks, key=lambda b: b["type"])


def test_static_policy_matches_go_vectors() -> None:
    """Hints, allocations (blocks, errors) and the whole machine state after
    every step of sequences the upstream policy went through."""
    scenarios = vectors("memorymanager.json")["scenarios"]
    assert len(scenarios) >= 50
    for sc in scenarios:
        m = sc["machine"]
        aff = Affinity()
        p = StaticPolicy(
            _vec_machine(m), {i: {"memory": r} for i, r in enumerate(m["reserved"])}, aff
        )
        s = MemoryManagerState("Static")
        p.start(s)
        pods: dict[str, dict[str, Any]] = {}
        for step in sc["steps"]:
            if step["op"] == "remove":
                p.remove_container(s, step["pod"], step["container"])
                assert _machine_json(s.get_machine_state()) == step["machine"], (
                    sc["machine"],
                    step,
                )
                continue
            if step.get("containers"):
                pods[step["pod"]] = _vec_pod(step["pod"], step["containers"])
                for c in step["containers"]:
                    if c.get("hint"):
                        aff.hints[(step["pod"], c["name"])] = TopologyHint(
                            bitmask.new_bitmask(c["hint"]), bool(c.get("preferred"))
                        )
            pod = pods[step["pod"]]
            ctr = next(
                c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]
                if c["name"] == step["container"]
            )  # fmt: skip
            hints = p.get_topology_hints(s, pod, ctr)
            got_hints = None if hints is None else {
                r: [f"{str(bitmask.get_bits(h.numa_affinity or 0)).replace(',', '')}:{str(h.preferred).lower()}" for h in hs]
                for r, hs in hints.items()
            }  # fmt: skip
            # An empty answer is omitted from the JSON (omitempty), as is none.
            assert (got_hints or None) == step.get("hints"), (sc["machine"], step)
            err = ""
            try:
                p.allocate(s, pod, ctr)
            except Exception as e:  # compared with the Go error text
                err = str(e)
            assert err == step.get("err", ""), (sc["machine"], step)
            blocks = s.get_memory_blocks(step["pod"], step["container"])
            got = None if blocks is None else [
                {"numaAffinity": b.numa_affinity, "type": b.type, "size": b.size} for b in blocks
            ]  # fmt: skip
            # Go appends the blocks in map order (random): compare them by type.
            assert _by_type(got) == _by_type(step["blocks"]), (sc["machine"], step)
            assert _machine_json(s.get_machine_state()) == step["machine"], (sc["machine"], step)
