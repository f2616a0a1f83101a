"""The node e2e harness's parts for tests marked `node_e2e`: the Go-built
suite and binaries (hack/parts/node-e2e.sh) and the test images."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benches.conformance.harness import RunFailed
from benches.node_e2e import harness
from kubelet.testing.images import ImageSet


def _missing(reason: str) -> None:
    # On CI a part that cannot start is a failure; elsewhere the test says
    # what to build and steps aside.
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node_e2e_images(tmp_path_factory: pytest.TempPathFactory) -> ImageSet:
    if os.geteuid() != 0:
        _missing("the node e2e harness needs root (containerd, kubelets, /var/lib/kubelet)")
    missing = [t for t in harness.TARGETS if not os.access(harness.BIN / t, os.X_OK)]
    if missing:
        _missing(f"not built: {' '.join(missing)} (run hack/parts/node-e2e.sh)")
    for tool in ("containerd", "runc", "dbus-daemon"):
        if not shutil.which(tool):
            _missing(f"{tool} not installed (run hack/parts/node-e2e.sh)")
    try:
        return harness.build_images(Path(tmp_path_factory.mktemp("node-e2e-images")))
    except (RunFailed, OSError, RuntimeError) as err:
        _missing(f"node e2e images cannot be built: {err}")
        raise
