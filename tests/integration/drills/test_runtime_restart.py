"""Drill: the simulated runtime restarted empty under running pods.

Every pod is recreated (one new sandbox each) and its container's restartCount
is what upstream shows after a runtime lost its state: one past the highest
`<n>.log` in the container's log directory. Long version:
python -m benches.drills runtime-empty --pods 1000.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benches.drills import runtime_restarted_empty
from kubelet.testing.controlplane import ControlPlane
from tests.fixtures.simruntime import SimRuntimeProc, start_simruntime

# Long (about 2 min): behind `hack/test.sh -m slow` and python -m benches.drills.
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.timeout(240)
def test_simulated_runtime_restarted_empty(control_plane: ControlPlane, tmp_path: Path) -> None:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"simr-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    sims: list[SimRuntimeProc] = [start_simruntime(d)]

    def restart() -> None:
        sims[-1].stop()
        (d / "sim.sock").unlink(missing_ok=True)
        sims.append(start_simruntime(d))

    try:
        r = runtime_restarted_empty(
            control_plane, tmp_path, sims[0].endpoint, restart, "drill-sim-empty", 100
        )
    finally:
        sims[-1].stop()
    print(r)
    assert not r.problems, r
