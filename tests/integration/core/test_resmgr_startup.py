"""What the kubelet refuses to start with for its CPU and memory managers
(run() in process against the simulated runtime, host paths on fixtures):
upstream's messages, after the container manager's own checks, as upstream's
NewContainerManager and Start give them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.cmd.run import StartupError
from kubelet.dependencies import Dependencies
from tests.integration.core.fixtures import host, server, sim_with, start


async def refused(tmp_path: Path, **cfg_fields: object) -> str:
    for sim in sim_with("cgroupfs"):
        s = server(tmp_path, sim.endpoint, **cfg_fields)
        with pytest.raises(StartupError) as err:
            await start(s, Dependencies(host_paths=host(tmp_path)))
        return str(err.value)
    raise AssertionError("no runtime")


async def test_static_policy_without_reserved_cpu_does_not_start(tmp_path: Path) -> None:
    message = await refused(tmp_path, cpu_manager_policy="static")
    assert message == (
        "failed to run Kubelet: start cpu manager error: [cpumanager] unable to determine "
        "reserved CPU resources for static policy"
    )


async def test_state_file_of_another_policy_stops_the_kubelet(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "cpu_manager_state").write_text(
        '{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438}'
    )
    message = await refused(tmp_path)
    assert message.endswith(
        'start cpu manager error: could not restore state from checkpoint: configured policy "none" '
        'differs from state checkpoint policy "static", please drain this node and delete the CPU '
        f'manager checkpoint file "{tmp_path}/root/cpu_manager_state" before restarting Kubelet'
    )


async def test_reserved_cpus_must_be_online(tmp_path: Path) -> None:
    message = await refused(tmp_path, cpu_manager_policy="static", reserved_system_cpus="4095")
    assert "reserved-cpus: 4095 is not a subset of online-cpus:" in message


async def test_memory_manager_reservation_must_match_node_allocatable(tmp_path: Path) -> None:
    message = await refused(
        tmp_path,
        memory_manager_policy="Static",
        reserved_memory=[{"numaNode": 0, "limits": {"memory": "1Gi"}}],
    )
    assert message.endswith(
        'start memory manager error: the total amount "1Gi" of type "memory" is not equal to the '
        'value "100Mi" determined by Node Allocatable feature'
    )
