"""The density harness on real containers: our kubelet on a private containerd
with runc brings 5 pods to Running in its own pod cgroups, the run measures
containerd and its shims, and everything the run made is gone afterwards. No
timing is asserted; the figures are for the benchmark report."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from benches.conformance.harness import _hierarchies
from benches.density.cluster import start_control_plane
from benches.density.harness import Run
from benches.density.spec import Spec
from kubelet.testing.containerd import Unavailable as ContainerdUnavailable
from kubelet.testing.containerd import parts
from kubelet.testing.controlplane import Unavailable
from kubelet.testing.parts import part_unavailable, starting, tail_of

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]


def test_density_on_containerd(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        part_unavailable("containerd", "needs root")
    with starting("containerd", ContainerdUnavailable):
        parts()  # the KPY_CONTAINERD flavour's containerd, shim, ctr and runc
    logs = tmp_path / "cp" / "logs"
    with starting("control plane", Unavailable, log_tail=lambda: tail_of(logs)):
        cp = start_control_plane(tmp_path)
    try:
        spec = Spec("ours", 0.25, 5, rate=5.0, hold=5.0, runtime="containerd")
        run = Run(cp, spec, tmp_path, 0)
        r = asyncio.run(run.run())
    finally:
        cp.stop()
    assert r.error is None, r.error
    assert r.runtime == "containerd"
    assert r.running == 5
    assert len(r.startup_latencies_s) == 5
    assert r.delete_all_s is not None
    assert r.api_requests_per_pod and r.api_requests_per_pod > 0
    assert r.containerd_cpu_cores is not None and r.containerd_cpu_cores > 0
    assert r.containerd_rss_mib is not None and r.containerd_rss_mib > 0
    assert r.containerd_startup_cpu_cores is not None and r.containerd_startup_cpu_cores > 0
    assert r.shims == 5  # one shim per pod, until the delete
    assert r.shims_rss_mib and r.shims_rss_mib > 0
    assert r.relist_p99_ms is not None
    assert len(r.load_avg) == 3
    # The pods ran in the kubelet's pod cgroups under the run's own root...
    cfg = (run.dir / "kubelet-config.yaml").read_text()
    assert "cgroupsPerQOS: true" in cfg
    root = next(line.split()[1] for line in cfg.splitlines() if line.startswith("cgroupRoot:"))
    # ...which is removed afterwards, with no shim or mount of the run left.
    assert not any((h / root.lstrip("/")).exists() for h in _hierarchies())
    assert run.ctd is not None and run.ctd.shim_pids() == []
    assert run.ctd.ctd is not None
    with open("/proc/self/mountinfo") as fh:
        table = fh.read()
    assert str(run.dir) not in table
    assert run.ctd.ctd.directory not in table  # a short directory when run.dir is long
