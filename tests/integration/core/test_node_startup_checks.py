"""The command's startup checks in process (run()), against the real simulated
runtime, with the host's /proc/swaps and /proc/sys replaced by fixtures:
failSwapOn, protectKernelDefaults, and the cgroup driver taken from the
runtime's RuntimeConfig (KubeletCgroupDriverFromCRI)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.container_manager import HostPaths
from kubelet.cmd.options import KubeletFlags, KubeletServer
from kubelet.cmd.run import StartupError, run
from kubelet.dependencies import Dependencies
from kubelet.util.sysctl import DESIRED_KERNEL_TUNABLES
from tests.fixtures.simruntime import SimRuntimeProc, start_simruntime

NO_SWAP = "Filename\tType\tSize\tUsed\tPriority\n"
SWAP_ON = NO_SWAP + "/swapfile\tfile\t1048572\t0\t-2\n"


def sim_with(driver: str) -> Iterator[SimRuntimeProc]:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"sim-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    sim = start_simruntime(d, "--cgroup-driver", driver)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(params=["cgroupfs", "systemd", "none"])
def sim(request: pytest.FixtureRequest) -> Iterator[tuple[SimRuntimeProc, str]]:
    """A simulated runtime whose RuntimeConfig reports this driver (none: UNIMPLEMENTED)."""
    for proc in sim_with(request.param):
        yield proc, request.param


def host(tmp: Path, swaps: str = NO_SWAP, sysctls: dict[str, int] | None = None) -> HostPaths:
    root = tmp / "proc-sys"
    for name, want in DESIRED_KERNEL_TUNABLES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{(sysctls or {}).get(name, want)}\n")
    (tmp / "swaps").write_text(swaps)
    return HostPaths(
        proc_swaps=str(tmp / "swaps"), proc_sys=str(root), systemd_runtime_dir=str(tmp / "no")
    )


def server(tmp: Path, endpoint: str, **cfg_fields: object) -> KubeletServer:
    cfg = KubeletConfiguration()
    cfg.container_runtime_endpoint = endpoint
    cfg.enable_server = False
    cfg.healthz_port = 0
    cfg.authorization.mode = "AlwaysAllow"
    # No cgroups at the machine's root: the node allocatable part has its own tests.
    cfg.cgroups_per_qos = False
    cfg.enforce_node_allocatable = []
    cfg.pod_logs_dir = str(tmp / "logs")
    for k, v in cfg_fields.items():
        setattr(cfg, k, v)
    flags = KubeletFlags(root_directory=str(tmp / "root"), hostname_override="node-s")
    return KubeletServer(flags, cfg)


async def start(s: KubeletServer, deps: Dependencies) -> None:
    """Start the node and stop it at once (run() only waits for `stop` once the
    node is up); raise what run() raised."""
    stop = asyncio.Event()
    stop.set()
    assert await asyncio.wait_for(run(s, deps, stop), 30) == 0


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
