"""Drill: the kubelet's root dir on a 64 MiB tmpfs filled to the last byte by a
pod's emptyDir and a filler file: DiskPressure, the hog evicted, recovery, no
torn state. Needs root to mount the tmpfs (skips otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benches.drills import disk_full
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.simruntime import SimRuntimeProc

# Long (about 2 min): behind `hack/test.sh -m slow` and python -m benches.drills.
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.timeout(420)
def test_root_dir_filesystem_full(
    control_plane: ControlPlane, simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = disk_full(control_plane, tmp_path, simruntime.endpoint, "drill-disk-full")
    print(r)
    assert not r.problems, r
