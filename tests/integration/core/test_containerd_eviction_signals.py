"""Eviction's signals on this machine with a real containerd: the disk layout
from containerd's ImageFsInfo, the root cgroup's working set through the stats
parsers, the task limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubelet.cri.remote import RemoteImageService
from kubelet.eviction import signals as sig
from kubelet.eviction.signals import NodeSignals
from kubelet.stats.provider import StatsProvider
from kubelet.testing.containerd import Containerd

pytestmark = pytest.mark.containerd


def _kv(path: str) -> dict[str, int]:
    out = {}
    with open(path) as fh:
        for line in fh:
            k, _, v = line.partition(" ")
            out[k] = int(v)
    return out


async def test_signals_and_layout_from_containerd(containerd: Containerd, tmp_path: Path) -> None:
    # Closed before the test's loop goes: a gRPC channel left open on a closed
    # loop breaks the channels of the tests after it.
    images = RemoteImageService(containerd.endpoint, 30)
    try:
        await _check_signals(containerd, images, tmp_path)
    finally:
        await images.close()


async def _check_signals(
    containerd: Containerd, images: RemoteImageService, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    sp = StatsProvider(list, str(root), "n")
    ns = NodeSignals(str(root), sp.version, sp.hierarchy, None, images.image_fs_info)
    layout = await ns.layout()
    assert layout is not None and layout.imagefs is not None
    # containerd keeps its images under its own root, here on the same disk as the
    # kubelet's root directory: one filesystem.
    assert layout.imagefs.startswith(containerd.directory)
    same = os.stat(layout.imagefs).st_dev == os.stat(root).st_dev
    assert layout.dedicated_image_fs is not same and not layout.split
    obs = ns.observe()
    st = os.statvfs(layout.imagefs)
    assert obs[sig.IMAGEFS].capacity == st.f_blocks * st.f_frsize
    assert obs[sig.CONTAINERFS] == obs[sig.IMAGEFS]
    if same:
        assert obs[sig.IMAGEFS].capacity == obs[sig.NODEFS].capacity
    # memory.available is MemTotal less the root cgroup's working set.
    mem = obs[sig.MEMORY]
    with open("/proc/meminfo") as fh:
        total = int(next(x for x in fh if x.startswith("MemTotal:")).split()[1]) * 1024
    assert mem.capacity == total
    if sp.version == 1:
        d = f"{sp.hierarchy}/memory"
        with open(f"{d}/memory.usage_in_bytes") as fh:
            usage = int(fh.read())
        ws = usage - _kv(f"{d}/memory.stat")["total_inactive_file"]
        # Read a moment apart: the same figure within 5 % of the machine's memory.
        assert abs((total - ws) - mem.available) < total // 20
    pid = obs[sig.PID]
    assert 0 < pid.available < pid.capacity
