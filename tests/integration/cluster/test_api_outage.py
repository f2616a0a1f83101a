"""The API server away at start and for a minute while pods run: nothing is lost.

Uses its own control plane, because it stops and restarts the API server.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest

from kubelet.testing.controlplane import ControlPlane
from tests.fixtures.cluster import start_control_plane
from tests.fixtures.simruntime import start_simruntime
from tests.integration.cluster.test_cluster_kubelet import (
    NODE,
    ClusterKubelet,
    create,
    pod_manifest,
    wait_for,
)

pytestmark = pytest.mark.cluster

OUTAGE_SECONDS = float(os.environ.get("KUBELET_TEST_OUTAGE_SECONDS", "60"))


def _ready_since(k: ClusterKubelet, after: str) -> bool:
    """Ready, with a Lease renewed after `after` (the node status itself is only
    re-sent on change or every nodeStatusReportFrequency, as upstream)."""
    n = k.kubectl_json("get", "node", NODE)
    ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
    lease = k.kubectl_json("get", "lease", NODE, "-n", "kube-node-lease")
    return ready["status"] == "True" and lease["spec"]["renewTime"] > after


def _static_running_locally(k: ClusterKubelet) -> bool:
    """Through the kubelet's own server, which needs no API server."""
    with urllib.request.urlopen(f"http://127.0.0.1:{k.healthz_port}/healthz", timeout=5) as r:
        assert r.status == 200
    return True


def _running(k: ClusterKubelet) -> dict[str, tuple[str, int]]:
    items = k.kubectl_json("get", "pods", "-n", "default", "-l", "app=steady")["items"]
    out = {}
    for p in items:
        if p["status"].get("phase") != "Running":
            return {}
        cs = p["status"]["containerStatuses"][0]
        out[p["metadata"]["name"]] = (cs["containerID"], cs["restartCount"])
    return out


def test_api_server_away_at_start_and_for_a_minute(tmp_path: Path) -> None:
    cp = start_control_plane(ControlPlane(str(tmp_path / "cp"), controllers=True))
    simdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"simo-{os.getpid()}-{time.monotonic_ns()}"
    simdir.mkdir(parents=True)
    sim = start_simruntime(simdir)
    k = None
    try:
        # 1. Unreachable at start: the static pod runs anyway, the kubelet keeps trying.
        cp.stop_apiserver()
        k = ClusterKubelet(cp, tmp_path, sim)
        wait_for("the kubelet's healthz", lambda: _static_running_locally(k), timeout=30)
        time.sleep(3)
        assert k.proc.poll() is None, k.log.read_text()[-2000:]
        log = k.log.read_text()
        assert "Unable to register node" in log
        assert "Created container" in log or "Started container" in log, log[-3000:]
        cp.start_apiserver()
        wait_for("the Node to register and be Ready", lambda: _ready_since(k, ""), timeout=90)

        # 2. Pods running, then the API server goes away.
        create(
            k, [pod_manifest(f"steady-{i}", {"app": "steady"}, "sleep 100000") for i in range(5)]
        )
        before = wait_for("5 pods Running", lambda: len(r := _running(k)) == 5 and r, timeout=60)
        cp.stop_apiserver()
        stopped = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        time.sleep(OUTAGE_SECONDS)
        assert k.proc.poll() is None, "the kubelet must ride out an API server outage"
        cp.start_apiserver()

        # 3. Back: Ready again, same containers, and the watch works (a new pod runs).
        wait_for("Ready, Lease renewed", lambda: _ready_since(k, stopped), timeout=90)
        after = wait_for("the 5 pods still Running", lambda: len(r := _running(k)) == 5 and r)
        assert after == before, "no container may be restarted or replaced by an outage"
        create(k, [pod_manifest("after-outage", {"app": "after"}, "sleep 100000")])
        wait_for(
            "a pod created after the outage to run",
            lambda: (
                k.kubectl_json("get", "pod", "after-outage", "-n", "default")["status"].get("phase")
                == "Running"
            ),
            timeout=60,
        )
    finally:
        if k is not None:
            k.stop()
            print(f"kubelet log: {k.log}")
        sim.stop()
        cp.stop()
