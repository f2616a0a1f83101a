"""Device plugin resources as NUMA hints and NUMA-aware picks
(devicemanager/topology_hints.go, filterByAffinity in manager.go), as pure
functions of what a plugin listed: device ID -> its NUMA nodes (empty: the
device has no topology).

A resource none of whose devices has a topology has no NUMA preference (None
hints). Otherwise every NUMA mask with enough devices to satisfy the request
is a hint, preferred when it is as narrow as the narrowest mask that the
resource's devices (all of them, free or not) could ever satisfy it on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import TopologyHint

NO_TOPOLOGY = -1  # nodeWithoutTopology: where devices without a topology are filed

Topology = Mapping[str, Sequence[int]]  # device ID -> NUMA nodes


def has_topology(numa: Topology) -> bool:
    """deviceHasTopologyAlignment: any device of the resource names a NUMA node."""
    return any(numa.values())


def _in_mask(mask: int, nodes: Iterable[int]) -> bool:
    # A NUMA ID a plugin made up (outside 0-63) is simply not in any mask.
    return any(bitmask.is_set(mask, n) for n in nodes)


def generate_hints(
    numa_nodes: list[int], numa: Topology, available: set[str], reusable: set[str], request: int
) -> list[TopologyHint]:
    """generateDeviceTopologyHints: a mask is a hint when the reusable devices
    with a topology all lie in it and, with the available devices in it, they
    make up the request."""
    narrowest = len(numa_nodes)
    masks: list[int] = []

    def visit(mask: int) -> None:
        nonlocal narrowest
        if bitmask.count(mask) < narrowest:
            if sum(1 for nodes in numa.values() if _in_mask(mask, nodes)) >= request:
                narrowest = bitmask.count(mask)
        matching = 0
        for d in reusable:
            nodes = numa.get(d) or ()
            if not nodes:
                continue
            if not _in_mask(mask, nodes):
                return
            matching += 1
        matching += sum(1 for d in available if _in_mask(mask, numa.get(d) or ()))
        if matching >= request:
            masks.append(mask)

    bitmask.iterate_bitmasks(numa_nodes, visit)
    return [TopologyHint(m, bitmask.count(m) == narrowest) for m in masks]


class Split(NamedTuple):
    """Free devices by where they sit relative to the chosen NUMA affinity."""

    aligned: list[str]
    unaligned: list[str]
    no_topology: list[str]


def filter_by_affinity(numa: Topology, affinity: int | None, available: Iterable[str]) -> Split:
    """filterByAffinity: without a topology or an affinity every device is
    'no topology'. Otherwise each device is filed under the first of its NUMA
    nodes in this order: nodes in the affinity, then other nodes, then the
    devices without topology; within each group nodes with fewer free devices
    come first (and device IDs in order within a node)."""
    avail = sorted(set(available))
    if affinity is None or not has_topology(numa):
        return Split([], [], avail)
    per_node: dict[int, list[str]] = {}
    for d in avail:
        for n in numa.get(d) or (NO_TOPOLOGY,):
            per_node.setdefault(n, []).append(d)

    def rank(n: int) -> tuple[int, int, int]:
        group = 0 if bitmask.is_set(affinity, n) else 2 if n == NO_TOPOLOGY else 1
        return (group, len(per_node[n]), n)

    out = Split([], [], [])
    seen: set[str] = set()
    for n in sorted(per_node, key=rank):
        target = out[rank(n)[0]]
        for d in per_node[n]:
            if d not in seen:
                seen.add(d)
                target.append(d)
    return out


def choose(need: int, groups: Iterable[Iterable[str]]) -> list[str]:
    """The first `need` distinct devices taking the groups in order."""
    out: list[str] = []
    for group in groups:
        for d in group:
            if len(out) == need:
                return out
            if d not in out:
                out.append(d)
    return out
