"""The CI version of `python -m benches.soak`: about three minutes of pod churn on
the simulated runtime, then every pod deleted. A leak shows as a rising line in
the samples after the warm-up or as tasks the drained kubelet still holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from statistics import mean

import pytest

from benches.soak import SoakSpec, run_soak, write_results
from kubelet.testing.controlplane import Unavailable
from kubelet.testing.parts import starting, tail_of

pytestmark = pytest.mark.cluster

MINUTES = float(os.environ.get("KUBELET_TEST_SOAK_MINUTES", "1.5"))


@pytest.mark.timeout(600)
def test_churn_leaves_tasks_and_descriptors_flat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SoakSpec(
        MINUTES, rate=5.0, alive=100, interval=10.0, warmup_minutes=0.5, max_deleting=50
    )
    # The kubelet reports the sizes of its maps at the baseline and after the
    # drain (kubelet/util/memdebug.py; counts only, no tracemalloc).
    mem = tmp_path / "mem"
    monkeypatch.setenv("KUBELET_MEMDEBUG", str(mem))
    monkeypatch.setenv("KUBELET_MEMDEBUG_FRAMES", "0")
    logs = tmp_path / "cp" / "logs"
    with starting("control plane", Unavailable, log_tail=lambda: tail_of(logs)):
        result = run_soak(spec, tmp_path)
    write_results(result, tmp_path / "results", "soak")
    print(f"soak record: {tmp_path / 'results'}")
    assert result.error is None, result.error
    steady = [s for s in result.samples if s["t_s"] >= spec.warmup_minutes * 60]
    assert len(steady) >= 6, result.samples
    assert all(s["errors"] == 0 for s in steady), steady
    assert sum(s["created"] for s in steady) > 0, steady
    # Under a churn held steady by the driver's back-pressure, descriptors stay
    # flat and tasks (a few per pod in flight) stay bounded.
    third = len(steady) // 3
    first_fds = mean(s["fds"] for s in steady[:third])
    last_fds = mean(s["fds"] for s in steady[-third:])
    assert last_fds <= first_fds + 5, f"fds rising under a steady churn: {steady}"
    first_tasks = max(s["tasks"] for s in steady[:third])
    last_tasks = max(s["tasks"] for s in steady[-third:])
    assert last_tasks <= first_tasks * 1.5, f"tasks rising under a steady churn: {steady}"
    # Every pod gone: the per-pod tasks are gone too (descriptors may stay in the
    # API clients' keep-alive pools, which are bounded).
    assert result.drained["running_pods"] == 0
    assert result.drained["tasks"] <= result.baseline["tasks"] + 2, (
        result.baseline,
        result.drained,
    )
    # Nor does any per-pod state: no map grew by anything like one entry per pod
    # churned (the pod cache kept one per pod ever run: 1,464 after 1,495 pods),
    # except the event recorder's caches, LRUs bounded at 4,096 as client-go's.
    base = json.loads((mem / "mem-0.json").read_text())["containers"]
    drained = json.loads((mem / "mem-1.json").read_text())["containers"]
    grown = {
        k: (base.get(k, 0), n)
        for k, n in drained.items()
        if n - base.get(k, 0) >= 20 and ".recorder." not in k
    }
    assert not grown, grown
