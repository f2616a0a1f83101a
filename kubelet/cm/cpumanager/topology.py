"""The CPU topology the CPU manager allocates over (pkg/kubelet/cm/cpumanager/topology).

Each logical CPU knows its NUMA node, socket, core and uncore (last-level)
cache. A core's ID is the lowest CPU ID among its threads, so it is unique
across sockets (sysfs core_id is not).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kubelet.cm.sysinfo import MachineTopology
from kubelet.util.cpuset import CPUSet


class CPUInfo(NamedTuple):
    numa: int
    socket: int
    core: int
    uncore: int


class CPUDetails:
    """CPU ID -> CPUInfo, with the lookups the allocator makes (all answer sets)."""

    __slots__ = ("_d",)

    def __init__(self, details: Mapping[int, CPUInfo]) -> None:
        self._d = dict(details)

    def __getitem__(self, cpu: int) -> CPUInfo:
        return self._d[cpu]

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._d

    def __len__(self) -> int:
        return len(self._d)

    def items(self) -> Iterable[tuple[int, CPUInfo]]:
        return self._d.items()

    def keep_only(self, cpus: CPUSet) -> CPUDetails:
        return CPUDetails({c: i for c, i in self._d.items() if c in cpus})

    def cpus(self) -> CPUSet:
        return frozenset(self._d)

    def numa_nodes(self) -> CPUSet:
        return frozenset(i.numa for i in self._d.values())

    def sockets(self) -> CPUSet:
        return frozenset(i.socket for i in self._d.values())

    def cores(self) -> CPUSet:
        return frozenset(i.core for i in self._d.values())

    def uncore_caches(self) -> CPUSet:
        return frozenset(i.uncore for i in self._d.values())

    def cpus_in_numa_nodes(self, *ids: int) -> CPUSet:
        return frozenset(c for c, i in self._d.items() if i.numa in ids)

    def cpus_in_sockets(self, *ids: int) -> CPUSet:
        return frozenset(c for c, i in self._d.items() if i.socket in ids)

    def cpus_in_cores(self, *ids: int) -> CPUSet:
        return frozenset(c for c, i in self._d.items() if i.core in ids)

    def cpus_in_uncore_caches(self, *ids: int) -> CPUSet:
        return frozenset(c for c, i in self._d.items() if i.uncore in ids)

    def numa_nodes_in_sockets(self, *ids: int) -> CPUSet:
        return frozenset(i.numa for i in self._d.values() if i.socket in ids)

    def sockets_in_numa_nodes(self, *ids: int) -> CPUSet:
        return frozenset(i.socket for i in self._d.values() if i.numa in ids)

    def cores_in_numa_nodes(self, *ids: int) -> CPUSet:
        return frozenset(i.core for i in self._d.values() if i.numa in ids)

    def cores_in_sockets(self, *ids: int) -> CPUSet:
        return frozenset(i.core for i in self._d.values() if i.socket in ids)

    def uncore_in_numa_nodes(self, *ids: int) -> CPUSet:
        return frozenset(i.uncore for i in self._d.values() if i.numa in ids)

    def cores_needed_in_uncore_cache(self, n: int, *ids: int) -> CPUSet:
        """The n lowest-ID cores of these uncore caches (all, when there are fewer)."""
        cores = sorted({i.core for i in self._d.values() if i.uncore in ids})
        return frozenset(cores[:n])


@dataclass(frozen=True)
class CPUTopology:
    num_cpus: int
    num_cores: int
    num_uncore_cache: int
    num_sockets: int
    num_numa_nodes: int
    details: CPUDetails

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def cpus_per_uncore(self) -> int:
        return self.num_cpus // self.num_uncore_cache if self.num_uncore_cache else 0

    def uncore_aligned(self, cpus: CPUSet) -> bool:
        """All the CPUs share one uncore cache (Alignment.UncoreCache)."""
        return len({self.details[c].uncore for c in cpus}) <= 1


def new_topology(details: Mapping[int, CPUInfo], num_sockets: int, num_cores: int) -> CPUTopology:
    d = CPUDetails(details)
    return CPUTopology(
        num_cpus=len(d),
        num_cores=num_cores,
        num_uncore_cache=len(d.uncore_caches()),
        num_sockets=num_sockets,
        num_numa_nodes=len(d.numa_nodes()),
        details=d,
    )


def discover(machine: MachineTopology) -> CPUTopology:
    """topology.Discover over the machine's NUMA nodes and cores."""
    if machine.num_cores == 0:
        raise ValueError("could not detect number of cpus")
    details: dict[int, CPUInfo] = {}
    physical_cores = 0
    for node in machine.nodes:
        physical_cores += len(node.cores)
        for core in node.cores:
            if not core.threads or len(set(core.threads)) != len(core.threads):
                raise ValueError(
                    f"could not get unique coreID for socket {core.socket_id} core {core.id} "
                    f"threads {core.threads}"
                )
            core_id = min(core.threads)
            uncore = core.uncore_caches[0].id if core.uncore_caches else core.socket_id
            for cpu in core.threads:
                details[cpu] = CPUInfo(node.id, core.socket_id, core_id, uncore)
    d = CPUDetails(details)
    return CPUTopology(
        num_cpus=machine.num_cores,
        num_cores=physical_cores,
        num_uncore_cache=len(d.uncore_caches()),
        num_sockets=machine.num_sockets,
        num_numa_nodes=len(d.numa_nodes()),
        details=d,
    )
