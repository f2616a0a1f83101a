"""What the in-process node tests share: a simulated runtime with a given
cgroup driver, host paths on fixtures, a KubeletServer for run() and a start
that stops at once, and Guaranteed pods on a fake NUMA machine with the
resource managers that pin them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.container_manager import HostPaths
from kubelet.cmd.options import KubeletFlags, KubeletServer
from kubelet.cmd.run import run
from kubelet.dependencies import Dependencies
from kubelet.testing.process import short_dir
from kubelet.testing.simruntime import SimRuntimeProc, start_simruntime
from kubelet.util.sysctl import DESIRED_KERNEL_TUNABLES

NO_SWAP = "Filename\tType\tSize\tUsed\tPriority\n"


def sim_with(driver: str) -> Iterator[SimRuntimeProc]:
    d = short_dir("sim")
    sim = start_simruntime(d, "--cgroup-driver", driver)
    try:
        yield sim
    finally:
        sim.stop()


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


def gu(cpu: str) -> list[dict]:
    res = {"cpu": cpu, "memory": "64Mi"}
    return [{"name": "c", "image": "busybox", "resources": {"requests": res, "limits": res}}]


# The CPU, memory and topology managers of a fake 2x2 NUMA machine, one CPU
# and 100Mi on node 0 reserved.
SETTINGS = {
    "cpu_manager_policy": "static",
    "reserved_system_cpus": "0",
    "topology_manager_policy": "best-effort",
    "memory_manager_policy": "Static",
    "reserved_memory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
}
