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
from kubelet.testing.controlplane import ControlPlane, Unavailable
from tests.fixtures.simruntime import SimRuntimeProc

# Long (about 3 min): behind `hack/test.sh -m slow` and python -m benches.drills.
pytestmark = [pytest.mark.cluster, pytest.mark.slow]

OUTAGE_S = float(os.environ.get("KUBELET_DRILL_OUTAGE_S", "20"))


@pytest.mark.timeout(420)
def test_api_outage_with_cut_watches(simruntime: SimRuntimeProc, tmp_path: Path) -> None:
    try:
        cp = ControlPlane(str(tmp_path / "cp"), controllers=True).start()
    except Unavailable as err:
        pytest.skip(f"control plane unavailable: {err}")
    try:
        r = api_outage(cp, tmp_path / "node", simruntime.endpoint, "drill-api-out", 50, OUTAGE_S)
    finally:
        cp.stop()
    print(r)
    assert not r.problems, r
