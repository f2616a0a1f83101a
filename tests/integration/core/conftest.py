"""In-process Kubelets on the real simulated runtime (or containerd), with fast periods."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.testing.containerd import Containerd
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import SimRuntimeProc


@pytest.fixture
async def node(simruntime: SimRuntimeProc, tmp_path: Path) -> AsyncIterator[InProcessKubelet]:
    async with in_process_kubelet(simruntime.endpoint, tmp_path) as n:
        yield n


@pytest.fixture
async def evented_node(
    simruntime: SimRuntimeProc, tmp_path: Path
) -> AsyncIterator[InProcessKubelet]:
    # The relist is far too slow to notice anything within a test: events must.
    async with in_process_kubelet(
        simruntime.endpoint, tmp_path, pleg_relist_period=60.0, feature_gates={"EventedPLEG": True}
    ) as n:
        yield n


@pytest.fixture
async def containerd_node(
    containerd: Containerd, tmp_path: Path
) -> AsyncIterator[InProcessKubelet]:
    async with in_process_kubelet(containerd.endpoint, tmp_path) as n:
        yield n


@pytest.fixture
async def containerd_qos_node(
    containerd: Containerd, tmp_path: Path
) -> AsyncIterator[InProcessKubelet]:
    # cgroupsPerQOS as on a real node: the kubelet keeps kubepods/<qos>/pod<uid>.
    async with in_process_kubelet(containerd.endpoint, tmp_path, cgroups_per_qos=True) as n:
        yield n


# The names the resource manager tests import: a node on the runtime `part` (the
# simulated runtime or containerd) as an async generator, for a restart in a test.
Node = InProcessKubelet


async def _node(
    part: SimRuntimeProc | Containerd, tmp_path: Path, **overrides: Any
) -> AsyncIterator[InProcessKubelet]:
    async with in_process_kubelet(part.endpoint, tmp_path, **overrides) as n:
        yield n


@pytest.fixture
async def short_root() -> AsyncIterator[Path]:
    """A root dir right under /tmp: a Unix socket path (kubelet.sock, a device
    plugin's) has at most 107 bytes, and pytest's tmp_path is too deep."""
    root = Path(tempfile.mkdtemp(prefix="sr", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
