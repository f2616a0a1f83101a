"""takeByTopology: which CPUs a request gets, on upstream's fake topologies.

Two kinds of facts: the cases of upstream's cpu_assignment_test.go tables
(inputs and expected sets, restated here), and vectors the Go code computed
over random available sets and sizes (hack/resmgr-vectors), which the port
must reproduce exactly, errors included.
"""

from __future__ import annotations

import pytest

from kubelet.cm.cpumanager import cpu_assignment as ca
from kubelet.util import cpuset
from tests.unit.cm.topologies import cpus, topology, vectors

PACKED_CASES = [
    # (topology, available, n, expected)
    ("SingleSocketHT", "0-7", 0, ""),
    ("SingleSocketHT", "0-7", 1, "0"),
    ("SingleSocketHT", "1,3,5-7", 1, "6"),
    ("SingleSocketHT", "0-7", 2, "0,4"),
    ("SingleSocketHT", "0-7", 8, "0-7"),
    ("SingleSocketHT", "0-3,6", 2, "2,6"),
    ("DualSocketHT", "0-11", 6, "0,2,4,6,8,10"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 40, "0-19,40-59"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 20, "0-9,40-49"),
    ("DualSocketMultiNumaPerSocketHT", "10-39,50-79", 20, "10-19,50-59"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 60, "0-29,40-69"),
    ("DualSocketMultiNumaPerSocketHT", "1-39,41-79", 60, "10-39,50-79"),
    ("DualSocketHT", "1-5,7-11", 1, "2"),
    ("DualSocketHT", "0-11", 8, "0,6,2,8,4,10,1,7"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 64, "0-29,40-69,30,31,70,71"),
]


@pytest.mark.parametrize("topo,avail,n,want", PACKED_CASES)
def test_packed_upstream_table(topo: str, avail: str, n: int, want: str) -> None:
    got = ca.take_by_topology_numa_packed(topology(topo), cpus(avail), n, ca.PACKED, False)
    assert got == cpus(want)


UNCORE_CASES = [
    ("UncoreSingleSocketNoSMT", "1-15", 10, "1,2,4-11"),
    ("DualSocketHT", "1-5,7-11", 1, "1"),
    ("UncoreDualSocketNoSMT", "0-15", 4, "0-3"),
    ("UncoreDualSocketNoSMT", "2-15", 6, "2-7"),
    ("UncoreDualSocketNoSMT", "8-15", 4, "8-11"),
    ("UncoreSingleSocketMultiNuma", "3,4-8,12", 2, "4,5"),
    ("UncoreSingleSocketSMT", "2-3,10-11,4-7,12-15", 6, "4,5,6,12,13,14"),
    ("UncoreSingleSocketSMT", "1-7,9-15", 10, "4-7,12-15,1,9"),
]


@pytest.mark.parametrize("topo,avail,n,want", UNCORE_CASES)
def test_prefer_align_by_uncore_cache_upstream_table(
    topo: str, avail: str, n: int, want: str
) -> None:
    got = ca.take_by_topology_numa_packed(topology(topo), cpus(avail), n, ca.PACKED, True)
    assert got == cpus(want)


SPREAD_CASES = [
    ("SingleSocketHT", "0-7", 3, "0,1,2"),
    ("DualSocketHT", "0-11", 2, "0,2"),
    ("DualSocketHT", "0-11", 3, "0,2,4"),
    ("DualSocketHT", "0-11", 6, "0,2,4,6,8,10"),
    ("DualSocketHT", "0-11", 8, "0,2,4,6,8,10,1,3"),
    ("DualSocketNoHT", "0-7", 2, "0,1"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 8, "0-7"),
    ("QuadSocketFourWayHT", "0-287", 12, "0-2,9-10,13-14,21-22,25-26,33"),
]


@pytest.mark.parametrize("topo,avail,n,want", SPREAD_CASES)
def test_distribute_across_cores_upstream_table(topo: str, avail: str, n: int, want: str) -> None:
    got = ca.take_by_topology_numa_packed(topology(topo), cpus(avail), n, ca.SPREAD, False)
    assert got == cpus(want)


DISTRIBUTED_CASES = [
    # (topology, available, n, group, expected)
    ("DualSocketHT", "0-11", 8, 1, "0,6,2,8,1,7,3,9"),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-79",
        64,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
    ),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67"),
    (
        "DualSocketMultiNumaPerSocketHT",
        "1-29,32-39,41-69,72-79",
        48,
        1,
        "1-8,10-17,20-27,41-48,50-57,60-67",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "2-29,31-39,42-69,71-79",
        48,
        1,
        "10-17,20-27,31-38,50-57,60-67,71-78",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
    ),
    ("DualSocketHT", "1-5,7-11", 1, 1, "1"),
    ("DualSocketHT", "1-5,7-11", 1, 2, "2"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
    ("DualSocketMultiNumaPerSocketHT", "0-79", 26, 2, "0-6,10-15,40-46,50-55"),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-79",
        62,
        2,
        "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
    ),
    (
        "DualSocketMultiNumaPerSocketHT",
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
    ),
    (
        "DualSocketMultiNumaPerSocketHTLarge",
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
    ),
]


@pytest.mark.parametrize("topo,avail,n,group,want", DISTRIBUTED_CASES)
def test_distributed_upstream_table(topo: str, avail: str, n: int, group: int, want: str) -> None:
    got = ca.take_by_topology_numa_distributed(topology(topo), cpus(avail), n, group, ca.PACKED)
    assert got == cpus(want)


def test_not_enough_cpus_is_upstreams_error() -> None:
    with pytest.raises(ca.AllocationError) as err:
        ca.take_by_topology_numa_packed(
            topology("SingleSocketHT"), cpus("0,2,4,6"), 5, ca.PACKED, False
        )
    assert (
        str(err.value) == "not enough cpus available to satisfy request: requested=5, available=4"
    )


def _check(v: dict, got: cpuset.CPUSet | None, err: str) -> None:
    if v.get("hang"):
        # Upstream never returns here (its remainder loop spins: odd free
        # counts with groups of 2). The port must return, and whatever it
        # hands out must be a proper answer.
        assert got is None or (len(got) == v["numCPUs"] and got <= cpuset.parse(v["available"]))
        return
    if v.get("err"):
        assert err == v["err"], v
    else:
        assert err == "" and got == cpuset.parse(v["result"]), (v, got, err)


def _run(fn, *args) -> tuple[cpuset.CPUSet | None, str]:  # type: ignore[no-untyped-def]
    try:
        return fn(*args), ""
    except ca.AllocationError as e:
        return None, str(e)


def test_packed_matches_go_vectors() -> None:
    vs = vectors("cpumanager.json")["packed"]
    assert len(vs) > 500
    for v in vs:
        sorting = ca.SPREAD if v.get("spread") else ca.PACKED
        got, err = _run(
            ca.take_by_topology_numa_packed,
            topology(v["topology"]), cpuset.parse(v["available"]), v["numCPUs"], sorting,
            bool(v.get("uncore")),
        )  # fmt: skip
        _check(v, got, err)


def test_distributed_matches_go_vectors() -> None:
    vs = vectors("cpumanager.json")["distributed"]
    assert len(vs) > 300
    assert any(v.get("hang") for v in vs)  # the upstream hang, recorded by gen.sh
    for v in vs:
        got, err = _run(
            ca.take_by_topology_numa_distributed,
            topology(v["topology"]), cpuset.parse(v["available"]), v["numCPUs"], v["group"],
            ca.PACKED,
        )  # fmt: skip
        _check(v, got, err)


def test_go_slice_aliasing_is_reproduced() -> None:
    # A combination of 4 handed to the callback shares its last element with
    # the next combination of the same prefix (Go's append into spare capacity).
    seen: list[ca.GoSlice] = []
    ca.iterate_combinations([0, 1, 2, 3, 4], 4, lambda s: seen.append(s) or False)
    assert [s.items() for s in seen][:2] == [[0, 1, 2, 4], [0, 1, 2, 4]]
    fresh: list[list[int]] = []
    ca.iterate_combinations([0, 1, 2, 3, 4], 3, lambda s: fresh.append(s.items()) or False)
    assert fresh[:2] == [[0, 1, 2], [0, 1, 3]]
