"""The node e2e harness's parts for tests marked `node_e2e`: the Go-built
suite and binaries (hack/parts/node-e2e.sh) and the test images."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from benches.conformance.harness import RunFailed
from benches.node_e2e import harness
from kubelet.testing.images import ImageSet
from kubelet.testing.parts import part_unavailable


def _missing(reason: str) -> NoReturn:
    # On CI a part that cannot start is a failure; elsewhere the test says
    # what to build and steps aside.
    part_unavailable("node e2e", reason)


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
