"""The project's csi-resizer stand-in (hack/parts/csi/cmd/csi-resizer) on its
own: its Go tests drive one claim's sync against client-go's fake API server
and a scripted ControllerExpandVolume (the node step left pending, a driver
that needs none, a refused size, a transient failure, claims it must leave
alone). The cluster test of a block volume growing in a running container
(test_csi_cluster.py) runs it for real."""

from __future__ import annotations

import os
import shutil
import subprocess

from kubelet.testing import csi as parts
from kubelet.testing.parts import part_unavailable


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(go, os.X_OK):
        part_unavailable("go", "no Go toolchain: run hack/parts/csi.sh")
    return go


def test_resizer_go_tests_pass() -> None:
    r = subprocess.run(
        [_go(), "test", "-count=1", "-v", "./cmd/csi-resizer"],
        cwd=parts.OURS_SRC,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CGO_ENABLED": "0"},
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = [line for line in r.stdout.splitlines() if line.startswith("--- PASS")]
    assert len(passed) == 5, r.stdout
