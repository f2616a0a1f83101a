"""An in-process Kubelet on the real simulated runtime, with fast periods."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.apis.config import KubeletConfiguration
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
from kubelet.kubelet import Kubelet
from kubelet.kuberuntime.backoff import Backoff


class Node:
    def __init__(self, kubelet: Kubelet, manifests: Path, rt: RemoteRuntimeService) -> None:
        self.kubelet = kubelet
        self.manifests = manifests
        self.rt = rt

    def write(self, name: str, containers: list[dict[str, Any]], **spec: Any) -> Path:
        meta = spec.pop("metadata", {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **meta},
            "spec": {"containers": containers, **spec},
        }
        p = self.manifests / f"{name}.yaml"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(pod))
        tmp.rename(p)  # atomic, as editors and config tools do
        return p

    def pod(self, name: str) -> dict[str, Any] | None:
        for p in self.kubelet.host.get_pods():
            if p["metadata"]["name"] == f"{name}-node-a":
                return p
        return None

    def phase(self, name: str) -> str | None:
        p = self.pod(name)
        return p.get("status", {}).get("phase") if p else None

    def container(self, name: str, cname: str) -> dict[str, Any]:
        p = self.pod(name)
        assert p is not None
        st = p["status"]
        for c in st.get("containerStatuses", []) + st.get("initContainerStatuses", []):
            if c["name"] == cname:
                return c
        raise KeyError(cname)

    async def wait(self, pred: Callable[[], Any], timeout: float = 30.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if pred():
                    return
            except (KeyError, TypeError, AssertionError):
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what or pred}")


@pytest.fixture
async def node(simruntime, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    async for n in _node(simruntime, tmp_path):
        yield n


@pytest.fixture
async def evented_node(simruntime, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    # The relist is far too slow to notice anything within a test: events must.
    async for n in _node(
        simruntime, tmp_path, pleg_relist_period=60.0, feature_gates={"EventedPLEG": True}
    ):
        yield n


@pytest.fixture
async def containerd_node(containerd, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    async for n in _node(containerd, tmp_path):
        yield n


@pytest.fixture
async def containerd_qos_node(containerd, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    # cgroupsPerQOS as on a real node: the kubelet keeps kubepods/<qos>/pod<uid>.
    async for n in _node(containerd, tmp_path, cgroups_per_qos=True):
        yield n


async def _node(
    simruntime, tmp_path: Path, machine_topology: Any = None, **overrides: Any
) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)  # a second kubelet on the same dirs: a restart
    cfg = KubeletConfiguration()
    cfg.static_pod_path = str(manifests)
    cfg.pleg_relist_period = 0.1
    cfg.file_check_frequency = 1.0
    cfg.sync_frequency = 10.0
    cfg.pod_logs_dir = str(tmp_path / "logs")
    cfg.cgroups_per_qos = False
    cfg.max_pods = 500  # the 200-pod test is over the default 110
    recorder = overrides.pop("recorder", None)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    rt = RemoteRuntimeService(simruntime.endpoint, 10)
    img = RemoteImageService(simruntime.endpoint, 10)
    k = Kubelet(
        cfg,
        "node-a",
        str(tmp_path / "root"),
        rt,
        img,
        node_ip="192.0.2.10",
        recorder=recorder,
        # Upstream is 10s doubling to 5m; shrunk so tests see several restarts.
        crash_backoff=Backoff(0.5, 4.0),
        image_backoff=Backoff(0.5, 4.0),
        machine_topology=machine_topology,
    )
    task = asyncio.create_task(k.run())
    try:
        yield Node(k, manifests, rt)
    finally:
        await k.stop()
        await asyncio.wait_for(task, 30)
        await rt.close()
