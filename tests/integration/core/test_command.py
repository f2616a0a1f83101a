"""The real `kubelet` command as a process: config + flags, servers, restart with re-adoption."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from kubelet.testing.kubelets import (
    KubeletProcess,
    remove_all_pods,
    sleeper_pod,
    standalone_kubelet,
    write_manifest,
)
from kubelet.testing.net import http_get as get
from kubelet.testing.net import wait_http
from kubelet.testing.wait import wait_for


def test_config_flags_servers_and_clean_exit(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    manifests.mkdir()
    k = standalone_kubelet(tmp_path, simruntime.endpoint, manifests)
    try:
        assert wait_http(f"http://127.0.0.1:{k.healthz_port}/healthz") == b"ok"
        conf = json.loads(wait_http(f"https://127.0.0.1:{k.port}/configz"))["kubeletconfig"]
        assert conf["maxPods"] == 70  # the flag beat the file's 50
        assert conf["plegRelistPeriod"] == "100ms"  # the file beat the default
        assert conf["syncFrequency"] == "1m0s"  # the default
        metrics = wait_http(f"http://127.0.0.1:{k.read_only_port}/metrics").decode()
        assert "kubelet_pleg_relist_duration_seconds_bucket" in metrics
    finally:
        assert k.stop() == 0  # SIGTERM is a clean shutdown
    assert "Shutting down" in k.log.read_text()


@pytest.mark.parametrize(
    "runtime", ["simruntime", pytest.param("containerd", marks=pytest.mark.containerd)]
)
def test_killed_kubelet_readopts_running_pods(runtime: str, request, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    simruntime = request.getfixturevalue(runtime)
    manifests = tmp_path / "m"
    manifests.mkdir()
    for i in range(5):
        write_manifest(manifests, sleeper_pod(f"p{i}"))
    k = standalone_kubelet(tmp_path, simruntime.endpoint, manifests)

    def running(kp: KubeletProcess) -> dict[str, tuple[str, int]]:
        out = {}
        for name, p in kp.pods().items():
            st = p.get("status", {})
            for c in st.get("containerStatuses", []):
                if "running" in c["state"]:
                    out[name] = (c["containerID"], c["restartCount"])
        return out

    def five_running(kp: KubeletProcess) -> dict[str, tuple[str, int]]:
        now = running(kp)
        return now if len(now) >= 5 else {}

    before = wait_for("5 containers running", lambda: five_running(k), 30.0, 0.2, retry_on=())
    assert len(before) == 5
    assert k.stop(signal.SIGKILL) == -signal.SIGKILL
    k2 = standalone_kubelet(tmp_path, simruntime.endpoint, manifests)
    try:
        wait_for("5 containers running again", lambda: five_running(k2), 30.0, 0.2, retry_on=())
        time.sleep(1.5)  # a few relists and housekeeping rounds later...
        assert running(k2) == before  # same containers, restartCount unchanged
    finally:
        k2.stop()
        remove_all_pods(simruntime.endpoint)  # the runtime may be shared with other tests


def test_runonce_starts_static_pods_and_exits(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    manifests.mkdir()
    write_manifest(manifests, sleeper_pod("once"))
    k = standalone_kubelet(tmp_path, simruntime.endpoint, manifests, "--runonce")
    assert k.proc.wait(60) == 0
    assert "runonce: pod default/once-node-b is Running" in k.log.read_text()


def test_lock_contention_hands_over_to_the_new_kubelet(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    manifests.mkdir()
    lock = str(tmp_path / "kubelet.lock")
    first = standalone_kubelet(
        tmp_path, simruntime.endpoint, manifests, "--lock-file", lock, "--exit-on-lock-contention"
    )
    try:
        wait_http(f"http://127.0.0.1:{first.healthz_port}/healthz")
        second = standalone_kubelet(
            tmp_path,
            simruntime.endpoint,
            manifests,
            "--lock-file",
            lock,
            "--exit-on-lock-contention",
        )
        try:
            # The first one sees the second open the lock file and steps down.
            assert first.proc.wait(30) == 0
            assert wait_http(f"http://127.0.0.1:{second.healthz_port}/healthz") == b"ok"
        finally:
            second.stop()
    finally:
        first.stop()


TALKER = """
apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  containers:
  - name: c
    image: busybox:1.36
    command: ["sh", "-c", "echo hello; echo world; sleep 1; exit 3"]
"""


def test_container_logs_on_the_kubelet_port(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "talker.yaml").write_text(TALKER)
    # Log usage on /metrics is measured each volumeStatsAggPeriod.
    k = standalone_kubelet(tmp_path, simruntime.endpoint, manifests, "--volume-stats-agg-period=1s")
    base = f"https://127.0.0.1:{k.port}/containerLogs/default/talker-node-b"
    try:

        def restarted() -> bool:
            st = k.pods().get("talker-node-b", {}).get("status", {})
            return any(c.get("restartCount", 0) >= 1 for c in st.get("containerStatuses") or [])

        wait_for("the container restarted", restarted, 30.0, 0.2, retry_on=())
        # Whichever run is current, each printed the same two lines.
        code, body = get(f"{base}/c")
        assert (code, body) == (200, b"hello\nworld\n")
        assert get(f"{base}/c?previous=true") == (200, b"hello\nworld\n")
        assert get(f"{base}/c?tailLines=1&previous=true") == (200, b"world\n")
        code, body = get(f"{base}/c?timestamps=true&previous=true")
        stamp, _, text = body.split(b"\n")[0].partition(b" ")
        assert (
            code == 200
            and text == b"hello"
            and len(stamp) == len(b"2026-01-02T03:04:05.123456789Z")
        )
        used = 'kubelet_container_log_filesystem_used_bytes{container="c",namespace="default",'
        metrics = f"http://127.0.0.1:{k.read_only_port}/metrics"

        def log_usage() -> bool:
            lines = get(metrics)[1].decode().splitlines()
            return any(ln.startswith(used) and float(ln.split()[-1]) > 0 for ln in lines)

        wait_for("the container's log usage on /metrics", log_usage, 30.0, 0.5, retry_on=())
        assert get(f"{base}/nope")[0] == 404
        assert get(f"https://127.0.0.1:{k.port}/containerLogs/default/ghost/c")[0] == 404
        assert get(f"{base}/c?limitBytes=0")[0] == 422
        # Not on the read-only port, as upstream.
        assert (
            get(f"http://127.0.0.1:{k.read_only_port}/containerLogs/default/talker-node-b/c")[0]
            == 404
        )
    finally:
        assert k.stop() == 0
