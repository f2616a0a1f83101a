"""Fake machine topologies for the resource manager tests.

The named ones are upstream's test topologies (cpumanager/policy_test.go),
dumped by hack/resmgr-vectors/gen.sh into tests/fixtures/resmgr/cpumanager.json
together with the vectors computed over them by the Go code.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from kubelet.cm.cpumanager.topology import CPUDetails, CPUInfo, CPUTopology
from kubelet.cm.sysinfo import Core, MachineTopology, Node
from kubelet.util import cpuset

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "resmgr"


@functools.cache
def vectors(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def topology(name: str) -> CPUTopology:
    t = vectors("cpumanager.json")["topologies"][name]
    details = {int(c): CPUInfo(*v) for c, v in t["details"].items()}
    return CPUTopology(
        num_cpus=t["numCPUs"],
        num_cores=t["numCores"],
        num_uncore_cache=t["numUncoreCache"],
        num_sockets=t["numSockets"],
        num_numa_nodes=t["numNUMANodes"],
        details=CPUDetails(details),
    )


def cpus(text: str) -> cpuset.CPUSet:
    return cpuset.parse(text)


def two_numa_nodes() -> MachineTopology:
    """Two NUMA nodes of two single-thread cores (CPUs 0-1, 2-3) and 8 GiB each."""
    nodes = [
        Node(
            n,
            [Core(c, 0, [c]) for c in (2 * n, 2 * n + 1)],
            8 << 30,
            [],
            [10, 20] if n == 0 else [20, 10],
        )
        for n in (0, 1)
    ]
    return MachineTopology(nodes, 4, 1)
