"""crictl (built from cri-tools) drives the simulated runtime like any CRI runtime."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kubelet.testing.parts import part_unavailable

pytestmark = pytest.mark.crictl

CRICTL_VERSION = os.environ.get("CRICTL_VERSION", "v1.34.0")


def crictl_path() -> str:
    base = os.environ.get("KUBELET_CACHE", os.path.expanduser("~/.cache/kubelet-py"))
    path = os.path.join(base, f"cri-tools-{CRICTL_VERSION}", "crictl")
    if os.access(path, os.X_OK):
        return path
    found = shutil.which("crictl")
    if found:
        return found
    part_unavailable("crictl", f"{path} missing: run hack/parts/crictl.sh")


def run(endpoint: str, *args: str) -> str:
    cmd = [
        crictl_path(),
        "--runtime-endpoint",
        endpoint,
        "--image-endpoint",
        endpoint,
        "--timeout",
        "10s",
        *args,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"crictl {' '.join(args)} failed: {p.stderr}"
    return p.stdout


def test_crictl_full_lifecycle(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ep = simruntime.endpoint
    pod = tmp_path / "pod.json"
    pod.write_text(
        json.dumps(
            {
                "metadata": {
                    "name": "crictl-pod",
                    "namespace": "default",
                    "uid": "crictl-uid-1",
                    "attempt": 0,
                },
                "log_directory": str(tmp_path / "logs"),
                "linux": {},
            }
        )
    )
    ctr = tmp_path / "ctr.json"
    ctr.write_text(
        json.dumps(
            {
                "metadata": {"name": "hello"},
                "image": {"image": "busybox:1.36"},
                "command": ["sh", "-c", "echo hello from crictl; sleep infinity"],
                "log_path": "hello/0.log",
                "linux": {},
            }
        )
    )
    assert "Image is up to date" in run(ep, "pull", "busybox:1.36")
    assert "busybox" in run(ep, "images")
    pod_id = run(ep, "runp", str(pod)).strip()
    pods = json.loads(run(ep, "pods", "-o", "json"))["items"]
    assert [(p["id"], p["state"]) for p in pods] == [(pod_id, "SANDBOX_READY")]
    cid = run(ep, "create", pod_id, str(ctr), str(pod)).strip()
    run(ep, "start", cid)
    ps = json.loads(run(ep, "ps", "-o", "json"))["containers"]
    assert [(c["id"], c["state"]) for c in ps] == [(cid, "CONTAINER_RUNNING")]
    inspect = json.loads(run(ep, "inspect", cid))
    assert inspect["status"]["metadata"]["name"] == "hello"
    deadline = time.monotonic() + 10
    logs = ""
    while time.monotonic() < deadline and "hello from crictl" not in logs:
        logs = run(ep, "logs", cid)
        time.sleep(0.1)
    assert "hello from crictl" in logs
    assert run(ep, "exec", "--sync", cid, "echo", "inside").strip() == "inside"
    run(ep, "stop", "--timeout", "1", cid)
    ps = json.loads(run(ep, "ps", "-a", "-o", "json"))["containers"]
    assert ps[0]["state"] == "CONTAINER_EXITED"
    run(ep, "rm", cid)
    assert json.loads(run(ep, "ps", "-a", "-o", "json"))["containers"] == []
    run(ep, "stopp", pod_id)
    run(ep, "rmp", pod_id)
    assert json.loads(run(ep, "pods", "-o", "json"))["items"] == []
    version = run(ep, "version")
    assert "RuntimeName:  simruntime" in version
