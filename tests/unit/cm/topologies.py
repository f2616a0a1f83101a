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
