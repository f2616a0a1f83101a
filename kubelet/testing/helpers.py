"""A RuntimeHelper for tests that drive the runtime manager without the rest of
the node: no API client, no cluster DNS, no volumes beyond what the pod's
volume manager (with no plugins) reports."""

from __future__ import annotations

import os
import subprocess

from kubelet.cm.cgroup_manager import CgroupManager
from kubelet.container.env import EnvContext
from kubelet.kubelet_pods import PodRuntimeHelper
from kubelet.network.dns import DNSConfigurer
from kubelet.util import mountutil
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


def can_mount_tmpfs(scratch: str) -> bool:
    """Whether this process may mount (root, not in a locked-down container):
    a small tmpfs tried at `scratch`/probe, then undone."""
    d = os.path.join(scratch, "probe")
    os.mkdir(d)
    try:
        mountutil.mount("tmpfs", d, "tmpfs", "size=4096")
    except OSError:
        return False
    mountutil.umount(d)
    os.rmdir(d)
    return True


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_cgroup_tree(name: str) -> None:
    """A test's private cgroup root and everything under it, deepest first, in
    every hierarchy (runc's own ones too); a busy directory is left."""
    mgr = CgroupManager("")
    paths = [p for _c, p in mgr._paths(name)] + [f"{m}/{name}" for m in mgr.runtime_only]
    for path in paths:
        for dirpath, _d, _f in sorted(os.walk(path), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
