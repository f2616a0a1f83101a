"""A RuntimeHelper for tests that drive the runtime manager without the rest of
the node: no API client, no cluster DNS, no volumes beyond what the pod's
volume manager (with no plugins) reports."""

from __future__ import annotations

import subprocess

from kubelet.container.env import EnvContext
from kubelet.kubelet_pods import PodRuntimeHelper
from kubelet.network.dns import DNSConfigurer
from kubelet.volume import VolumeHost
from kubelet.volumemanager.manager import VolumeManagerImpl


def standalone_runtime_helper(
    root_dir: str, resolv_conf: str = "/etc/resolv.conf"
) -> PodRuntimeHelper:
    return PodRuntimeHelper(
        root_dir,
        DNSConfigurer([], "", resolv_conf),
        "",
        EnvContext(),
        VolumeManagerImpl(VolumeHost(root_dir, "node"), []),
    )


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
