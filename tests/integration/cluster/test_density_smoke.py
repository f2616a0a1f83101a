"""The density harness in its quick mode, as a smoke test: it runs from its one
command, both kubelets bring 100 pods to Running and delete them. No timing is
asserted here; the figures are for the benchmark report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benches.density.cluster import upstream_kubelet
from kubelet.testing.parts import part_unavailable

pytestmark = pytest.mark.cluster


def test_density_quick_mode(control_plane, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # control_plane: skips with its reason where a control plane cannot start.
    if upstream_kubelet() is None:
        # The benchmark's point is the comparison: without the upstream kubelet
        # the harness would run ours alone.
        part_unavailable("upstream kubelet", "not built: run hack/parts/control-plane.sh")
    out = tmp_path / "out"
    # Two scrapes of each stats endpoint and a short idle window: the path of
    # the stats-cost measurement runs too (benches/density/scrape.py).
    proc = subprocess.run(
        [sys.executable, "-m", "benches.density", "--quick", "--scrapes", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "DENSITY_IDLE_S": "2"},
    )
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0
    records = json.loads((out / "result.json").read_text())
    kinds = {r["kubelet"] for r in records}
    assert kinds == {"ours", "upstream"}
    for r in records:
        assert r["error"] is None
        assert r["running"] == 100
        assert len(r["startup_latencies_s"]) == 100
        assert r["delete_all_s"] is not None
        assert r["api_requests"] > 0
        assert r["idle_cpu_cores"] is not None and r["idle_rss_mib"] > 0
        paths = [e["path"] for e in r["scrape"]["endpoints"]]
        assert paths == ["/stats/summary", "/metrics/resource"]
        assert all(e["bytes"] > 0 and e["scrapes"] == 2 for e in r["scrape"]["endpoints"])
    assert (out / "startup_cdf.png").stat().st_size > 0
