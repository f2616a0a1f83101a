"""Drill: the API server away for a while under many pods, and the kubelet's
connections to it cut every 3 s through a proxy the whole time. Pods finish
during the outage and are deleted just before it; afterwards the API's
statuses match the runtime's containers, none lost. Its own control plane.
Long version: python -m benches.drills api-outage --pods 1000 (60 s away)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benches.drills import api_outage
from kubelet.testing.controlplane import ControlPlane
from tests.fixtures.cluster import start_control_plane
from tests.fixtures.simruntime import SimRuntimeProc

pytestmark = pytest.mark.cluster

OUTAGE_S = float(os.environ.get("KUBELET_DRILL_OUTAGE_S", "20"))


# The short form runs in every CI run; the long one (about 3 min) behind
# `hack/test.sh -m slow`, the longest in python -m benches.drills.
@pytest.mark.timeout(420)
@pytest.mark.parametrize("pods", [20, pytest.param(50, marks=pytest.mark.slow)])
def test_api_outage_with_cut_watches(simruntime: SimRuntimeProc, tmp_path: Path, pods: int) -> None:
    cp = start_control_plane(ControlPlane(str(tmp_path / "cp"), controllers=True))
    try:
        r = api_outage(cp, tmp_path / "node", simruntime.endpoint, "drill-api-out", pods, OUTAGE_S)
    finally:
        cp.stop()
    print(r)
    assert not r.problems, r
