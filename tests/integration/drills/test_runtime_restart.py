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

pytestmark = pytest.mark.cluster


# The short form runs in every CI run; the long one (about 2 min) behind
# `hack/test.sh -m slow`, the longest in python -m benches.drills.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("pods", [20, pytest.param(100, marks=pytest.mark.slow)])
def test_simulated_runtime_restarted_empty(
    control_plane: ControlPlane, tmp_path: Path, pods: int
) -> None:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"simr-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    sims: list[SimRuntimeProc] = [start_simruntime(d)]

    def restart() -> None:
        sims[-1].stop()
        (d / "sim.sock").unlink(missing_ok=True)
        sims.append(start_simruntime(d))

    try:
        r = runtime_restarted_empty(
            control_plane, tmp_path, sims[0].endpoint, restart, "drill-sim-empty", pods
        )
    finally:
        sims[-1].stop()
    print(r)
    assert not r.problems, r
