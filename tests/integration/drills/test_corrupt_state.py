"""Drill: the kubelet's files torn on disk while it was down (kill -9): a clear
log line, the node serves again, no container restarted, the volume set up again."""

from __future__ import annotations

from pathlib import Path

import pytest

from benches.drills import corrupt_state
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.simruntime import SimRuntimeProc

pytestmark = pytest.mark.cluster


@pytest.mark.timeout(300)
def test_torn_state_files_after_kill9(
    control_plane: ControlPlane, simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    r = corrupt_state(control_plane, tmp_path, simruntime.endpoint, "drill-corrupt", 5)
    print(r)
    assert not r.problems, r
