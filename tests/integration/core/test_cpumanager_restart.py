"""A kubelet restart keeps every running pod's exclusive CPUs and memory
(simulated runtime, fake 2x2 NUMA machine): the pods are re-admitted one by
one, and admitting the first ones must not take the others, not yet seen
again, for pods that went away (upstream marks a source ready only once its
update is handled)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.integration.core.conftest import _node
from tests.integration.core.fixtures import SETTINGS, gu
from tests.unit.cm.topologies import two_numa_nodes


async def test_restart_keeps_allocations(
    simruntime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    first = _node(simruntime, tmp_path, machine_topology=two_numa_nodes(), **SETTINGS)
    node = await first.__anext__()
    for name in ("p1", "p2", "p3"):
        node.write(name, gu("1"))
    for name in ("p1", "p2", "p3"):
        await node.wait(
            lambda n=name: node.phase(n) == "Running", timeout=60, what=f"{name} Running"
        )
    root = Path(node.kubelet.root_dir)
    cpu_before = (root / "cpu_manager_state").read_text()
    mem_before = (root / "memory_manager_state").read_text()
    ids = {n: node.container(n, "c")["containerID"] for n in ("p1", "p2", "p3")}
    await first.aclose()

    caplog.set_level(logging.INFO, logger="kubelet.cm")
    second = _node(simruntime, tmp_path, machine_topology=two_numa_nodes(), **SETTINGS)
    node = await second.__anext__()
    try:
        for name in ("p1", "p2", "p3"):
            await node.wait(
                lambda n=name: node.phase(n) == "Running", timeout=60, what=f"{name} back"
            )
        # The same containers (not restarted), the same CPUs and memory.
        assert {n: node.container(n, "c")["containerID"] for n in ids} == ids
        assert (root / "cpu_manager_state").read_text() == cpu_before
        assert (root / "memory_manager_state").read_text() == mem_before
        assert not [r for r in caplog.records if "Releasing" in r.getMessage()]
    finally:
        await second.aclose()
