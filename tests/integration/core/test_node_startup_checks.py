"""The command's startup checks in process (run()), against the real simulated
runtime, with the host's /proc/swaps and /proc/sys replaced by fixtures:
failSwapOn, protectKernelDefaults, and the cgroup driver taken from the
runtime's RuntimeConfig (KubeletCgroupDriverFromCRI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.cmd.run import StartupError
from kubelet.dependencies import Dependencies
from kubelet.testing.simruntime import SimRuntimeProc
from tests.integration.core.fixtures import NO_SWAP, host, server, sim_with, start

SWAP_ON = NO_SWAP + "/swapfile\tfile\t1048572\t0\t-2\n"


@pytest.fixture(params=["cgroupfs", "systemd", "none"])
def sim(request: pytest.FixtureRequest) -> Iterator[tuple[SimRuntimeProc, str]]:
    """A simulated runtime whose RuntimeConfig reports this driver (none: UNIMPLEMENTED)."""
    for proc in sim_with(request.param):
        yield proc, request.param


async def test_swap_on_with_fail_swap_on_exits(tmp_path: Path) -> None:
    for sim in sim_with("cgroupfs"):
        s = server(tmp_path, sim.endpoint)
        with pytest.raises(StartupError, match="running with swap on is not supported"):
            await start(s, Dependencies(host_paths=host(tmp_path, swaps=SWAP_ON)))
        # failSwapOn: false runs with swap on.
        s = server(tmp_path, sim.endpoint, fail_swap_on=False)
        await start(s, Dependencies(host_paths=host(tmp_path, swaps=SWAP_ON)))


async def test_protect_kernel_defaults_exits_naming_each_sysctl(tmp_path: Path) -> None:
    wrong = {"vm/overcommit_memory": 0, "kernel/panic_on_oops": 0}
    for sim in sim_with("cgroupfs"):
        s = server(tmp_path, sim.endpoint, protect_kernel_defaults=True)
        with pytest.raises(StartupError) as err:
            await start(s, Dependencies(host_paths=host(tmp_path, sysctls=wrong)))
        assert "vm/overcommit_memory, expected value: 1, actual value: 0" in str(err.value)
        assert "kernel/panic_on_oops, expected value: 1, actual value: 0" in str(err.value)
        # Unprotected, the kubelet sets them (here: in the fixture).
        h = host(tmp_path, sysctls=wrong)
        await start(server(tmp_path, sim.endpoint), Dependencies(host_paths=h))
        assert (Path(h.proc_sys) / "vm/overcommit_memory").read_text() == "1"


async def test_cgroup_driver_comes_from_the_runtime(
    sim: tuple[SimRuntimeProc, str], tmp_path: Path
) -> None:
    """The runtime's answer replaces cgroupDriver; without one (UNIMPLEMENTED,
    as containerd 1.6) the configured driver stays. Here systemd is not init, so
    a systemd driver, configured or reported, stops the kubelet with a clear error."""
    proc, rt_driver = sim
    for configured in ("cgroupfs", "systemd"):
        s = server(tmp_path, proc.endpoint, cgroup_driver=configured)
        deps = Dependencies(host_paths=host(tmp_path))
        effective = configured if rt_driver == "none" else rt_driver
        if effective == "systemd":
            with pytest.raises(StartupError, match='cgroupDriver is "systemd" but systemd is not'):
                await start(s, deps)
        else:
            await start(s, deps)
        assert s.config.cgroup_driver == effective
