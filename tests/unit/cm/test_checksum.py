"""Checkpoint checksums and JSON byte for byte as the Go kubelet writes them.

The vectors (tests/fixtures/resmgr/*_checkpoint.json) were computed by the
upstream Go code (hack/resmgr-vectors/gen.sh): JSON bytes from
MarshalCheckpoint, the spew text from dump.ForHash, the checksum.
"""

from __future__ import annotations

import pytest

from kubelet.checkpointmanager.checksum import (
    GoMap,
    GoPtr,
    GoScalar,
    GoStruct,
    fnv32a,
    spew_for_hash,
)
from kubelet.cm.cpumanager import state as cpustate
from kubelet.cm.memorymanager import state as memstate
from tests.unit.cm.topologies import vectors


def test_fnv32a_reference_values() -> None:
    # FNV-1a 32 test values (the offset basis for "", and "a").
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    assert fnv32a(b"foobar") == 0xBF9CF968


def test_nil_pointer_in_a_map_keeps_the_next_type_hidden() -> None:
    # spew leaves ignoreNextType set after printing a nil pointer met inside a
    # map: the struct field that follows the map is printed without its type.
    v = GoPtr(
        "p.T",
        GoStruct(
            "p.T",
            (
                ("M", GoMap("map[int]*p.U", ((GoScalar("int", 1), GoPtr("p.U", None)),))),
                ("N", GoScalar("int", 5)),
            ),
        ),
    )
    assert spew_for_hash(v) == "(*p.T){M:(map[int]*p.U)map[1:<nil>] N:5}"


CPU = vectors("cpu_checkpoint.json")


@pytest.mark.parametrize("case", CPU["v2"], ids=lambda c: c["name"])
def test_cpu_checkpoint_matches_go(case: dict) -> None:
    entries = None if case.get("nilEntries") else (case["entries"] or {})
    cp = cpustate.Checkpoint(case["policyName"], case["defaultCpuSet"], entries)
    assert spew_for_hash(cpustate.go_value(cp)) == case["spew"]
    assert cpustate.encode(cp).decode() == case["json"]
    assert cp.checksum == case["checksum"]


@pytest.mark.parametrize("case", CPU["v2"], ids=lambda c: c["name"])
def test_cpu_checkpoint_from_go_is_read_and_verified(case: dict) -> None:
    if case.get("nilEntries"):
        # A nil map is hashed as <nil> but omitted from the JSON, so it reads
        # back as an empty map: the Go kubelet finds such a file corrupt too
        # (it never writes one: its checkpoints always carry a made map).
        with pytest.raises(cpustate.CorruptCheckpointError):
            cpustate.decode(case["json"].encode(), cpustate.ContainerMap())
        return
    cp = cpustate.decode(case["json"].encode(), cpustate.ContainerMap())
    assert cp.policy_name == case["policyName"]
    assert cp.default_cpuset == case["defaultCpuSet"]
    assert cp.checksum == case["checksum"]


def test_cpu_checkpoint_with_a_flipped_byte_is_corrupt() -> None:
    good = CPU["v2"][2]["json"]
    bad = good.replace('"app":"1"', '"app":"2"')
    with pytest.raises(cpustate.CorruptCheckpointError):
        cpustate.decode(bad.encode(), cpustate.ContainerMap())


def test_cpu_checkpoint_v1_is_migrated_through_the_container_map() -> None:
    containers = cpustate.ContainerMap()
    with pytest.raises(cpustate.CheckpointError, match="containerid-1"):
        cpustate.decode(CPU["v1"].encode(), containers)
    containers.add("pod-x", "ctr", "containerid-1")
    cp = cpustate.decode(CPU["v1"].encode(), containers)
    assert (cp.policy_name, cp.default_cpuset) == ("static", "0,3")
    assert cp.entries == {"pod-x": {"ctr": "1-2"}}
    assert CPU["v1Restored"] == "1-2"  # what upstream restored from the same file


MEM = vectors("memory_checkpoint.json")


@pytest.mark.parametrize("case", MEM["cases"], ids=lambda c: c["name"])
def test_memory_checkpoint_round_trips_go_bytes(case: dict) -> None:
    cp = memstate.decode(case["json"].encode())
    assert spew_for_hash(memstate.go_value(cp)) == case["spew"]
    assert cp.checksum == case["checksum"]
    again = memstate.encode(memstate.Checkpoint(cp.policy_name, cp.machine_state, cp.entries))
    assert again.decode() == case["json"]


def test_memory_checkpoint_tampered_is_corrupt() -> None:
    text = MEM["cases"][2]["json"].replace("18253611008", "18253611009")
    with pytest.raises(memstate.CorruptCheckpointError):
        memstate.decode(text.encode())
