"""Drill: containerd stopped for 40 s under running pods, then started again.

Upstream's kubelet calls the runtime down once no status check has passed for
30 s (maxWaitForContainerRuntime), so the outage here is longer than that: the
node goes NotReady saying so and comes back; nothing is recreated. Its own
containerd (the session one is shared). Long version: KUBELET_DRILL_DOWN_S=60.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benches.drills import runtime_stopped
from kubelet.testing.containerd import Containerd, Unavailable
from kubelet.testing.controlplane import ControlPlane

# Long (about 2 min): behind `hack/test.sh -m slow` and python -m benches.drills.
pytestmark = [pytest.mark.cluster, pytest.mark.containerd, pytest.mark.slow]

DOWN_S = float(os.environ.get("KUBELET_DRILL_DOWN_S", "40"))


@pytest.fixture
def own_containerd() -> Iterator[Containerd]:
    d = f"/tmp/kpy-ctd-drill-{os.getpid()}-{time.monotonic_ns() % 100000}"
    try:
        c = Containerd(d, subnet="10.244.8.0/24", bridge="kpyd1").start()
    except Unavailable as err:
        pytest.skip(f"containerd unavailable: {err}")
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.timeout(360)
def test_containerd_stopped_and_started_again(
    control_plane: ControlPlane, own_containerd: Containerd, tmp_path: Path
) -> None:
    r = runtime_stopped(control_plane, tmp_path, own_containerd, "drill-ctd-down", 5, DOWN_S)
    print(r)
    assert not r.problems, r
