"""Pod-level resources (spec.resources) reach the pod cgroup and the containers'
CRI config, on the simulated runtime and on containerd + runc, each with its
pod cgroups under a cgroup root private to the test (this host is cgroup v1:
cpu.cfs_quota_us and memory.limit_in_bytes are read back from the kernel)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from kubelet.testing.containerd import Containerd
from kubelet.testing.helpers import remove_cgroup_tree
from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import EventLog, InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import SimRuntimeProc

MiB = 1 << 20


def _pod_cgroups(root: str) -> list[Path]:
    return list(Path(f"/sys/fs/cgroup/cpu/{root}/kubepods").glob("**/pod*"))


@asynccontextmanager
async def _node_on(endpoint: str, tmp_path: Path, **cfg: Any) -> AsyncIterator[InProcessKubelet]:
    root = f"kpy-podlevel-{os.getpid()}-{time.monotonic_ns() % 100000}"
    try:
        async with in_process_kubelet(
            endpoint, tmp_path, cgroups_per_qos=True, cgroup_root=f"/{root}", **cfg
        ) as n:
            yield n
            for p in n.manifests.iterdir():
                p.unlink()
            await n.wait(lambda: not _pod_cgroups(root), timeout=60, what="pod cgroups gone")
    finally:
        remove_cgroup_tree(root)


@pytest.fixture(params=["simruntime", pytest.param("containerd", marks=pytest.mark.containerd)])
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[InProcessKubelet]:
    part: SimRuntimeProc | Containerd = request.getfixturevalue(request.param)
    async with _node_on(part.endpoint, tmp_path) as n:
        yield n


def _read(ctrl: str, rel: str, f: str) -> int:
    return int(Path(f"/sys/fs/cgroup/{ctrl}/{rel}/{f}").read_text().strip())


def sleeper(name: str = "c") -> dict[str, Any]:
    return {"name": name, "image": BUSYBOX_REF, "command": ["sh", "-c", "sleep 600"]}


async def test_pod_level_limits_set_the_pod_cgroup(node: InProcessKubelet) -> None:
    """Containers without limits of their own in a pod limited at pod level:
    the pod cgroup gets the pod's cpu quota and memory limit, as upstream's
    ResourceConfigForPod, and each container the pod's limits as its own."""
    resources = {"requests": {"cpu": "100m", "memory": "100Mi"},
                 "limits": {"cpu": "200m", "memory": "200Mi"}}  # fmt: skip
    node.write("burst", [sleeper("a"), sleeper("b")], resources=resources)
    guaranteed = {"limits": {"cpu": "300m", "memory": "64Mi"}}  # requests default to these
    node.write("guar", [sleeper()], resources=guaranteed)
    await node.wait(lambda: node.phase("burst") == "Running", timeout=90, what="burst Running")
    await node.wait(lambda: node.phase("guar") == "Running", timeout=90, what="guar Running")
    root = node.kubelet.config.cgroup_root.strip("/")
    burst, guar = (node.pod(n) for n in ("burst", "guar"))
    assert burst is not None and guar is not None
    assert burst["status"]["qosClass"] == "Burstable"
    assert guar["status"]["qosClass"] == "Guaranteed"
    b = f"{root}/kubepods/burstable/pod{burst['metadata']['uid']}"
    assert _read("cpu", b, "cpu.cfs_quota_us") == 20000
    assert _read("cpu", b, "cpu.cfs_period_us") == 100000
    assert _read("cpu", b, "cpu.shares") == 102
    assert _read("memory", b, "memory.limit_in_bytes") == 200 * MiB
    g = f"{root}/kubepods/pod{guar['metadata']['uid']}"
    assert _read("cpu", g, "cpu.cfs_quota_us") == 30000
    assert _read("cpu", g, "cpu.shares") == 307
    assert _read("memory", g, "memory.limit_in_bytes") == 64 * MiB
    # Each container's own resources, as the runtime was told them.
    for c in await node.rt.list_containers():
        if c.labels["io.kubernetes.pod.name"] != "burst-node-a":
            continue
        linux = (await node.rt.container_status(c.id)).status.resources.linux
        assert (linux.cpu_quota, linux.memory_limit_in_bytes) == (20000, 200 * MiB)


async def test_pod_level_resources_are_refused_with_the_gate_off(
    simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    events = EventLog()
    async with _node_on(
        simruntime.endpoint, tmp_path, feature_gates={"PodLevelResources": False}, recorder=events
    ) as node:
        node.write("pl", [sleeper()], resources={"limits": {"cpu": "1", "memory": "1Gi"}})
        node.write("plain", [sleeper()])
        await node.wait(lambda: node.phase("pl") == "Failed", timeout=60, what="pl refused")
        await node.wait(lambda: node.phase("plain") == "Running", timeout=60, what="plain")
        pod = node.pod("pl")
        assert pod is not None
        assert pod["status"]["reason"] == "PodLevelResourcesNotSupported"
        assert pod["status"]["message"] == (
            "Pod was rejected: PodLevelResources feature gate is disabled"
        )
        assert any(e[2] == "PodLevelResourcesNotSupported" for e in events.events)
