"""Topology manager admission in the running kubelet (simulated runtime), on a
fake machine of two NUMA nodes with two CPUs each: single-numa-node admits a
Guaranteed pod whose CPUs fit one node and pins it there (cpuset_cpus in the
CRI config, and cpuset_mems from the Static memory manager), and refuses one
that would span both with upstream's reason."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.core.conftest import Node as KubeletNode
from tests.integration.core.conftest import _node
from tests.integration.core.fixtures import gu
from tests.unit.cm.topologies import two_numa_nodes


@pytest.fixture
async def numa_node(simruntime, tmp_path: Path) -> AsyncIterator[KubeletNode]:  # type: ignore[no-untyped-def]
    async for n in _node(
        simruntime,
        tmp_path,
        machine_topology=two_numa_nodes(),
        cpu_manager_policy="static",
        reserved_system_cpus="0",
        topology_manager_policy="single-numa-node",
        memory_manager_policy="Static",
        # = the default hard eviction threshold (memory.available<100Mi)
        reserved_memory=[{"numaNode": 0, "limits": {"memory": "100Mi"}}],
    ):
        yield n


async def test_single_numa_node_pins_or_refuses(numa_node: KubeletNode) -> None:
    node = numa_node
    node.write("fits", gu("2"))
    await node.wait(lambda: node.phase("fits") == "Running", timeout=60, what="fits Running")
    cid = node.container("fits", "c")["containerID"].split("://")[1]
    st = (await node.rt.container_status(cid)).status
    # NUMA node 0 has CPU 0 reserved: two CPUs fit only on node 1, and the
    # memory manager places the memory there too.
    assert (st.resources.linux.cpuset_cpus, st.resources.linux.cpuset_mems) == ("2-3", "1")

    node.write("spans", gu("3"))
    await node.wait(lambda: node.phase("spans") == "Failed", timeout=60, what="spans refused")
    status = node.pod("spans")["status"]
    assert status["reason"] == "TopologyAffinityError"
    assert (
        status["message"]
        == "Pod was rejected: Resources cannot be allocated with Topology locality"
    )

    node.write("shared", [{"name": "c", "image": "busybox"}])
    await node.wait(lambda: node.phase("shared") == "Running", timeout=60, what="shared Running")
    cid = node.container("shared", "c")["containerID"].split("://")[1]
    assert (await node.rt.container_status(cid)).status.resources.linux.cpuset_cpus == "0-1"
