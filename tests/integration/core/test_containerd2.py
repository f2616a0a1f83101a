"""What containerd 2 (the default runtime part, built from its module) gives the
kubelet that containerd 1.6 did not: RuntimeConfig (the cgroup driver) and the
GetContainerEvents stream (the evented PLEG); and what the kubelet asks of it:
swap settings and the per-cgroup pressure read back in /stats/summary."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cmd.node import cgroup_driver_from_cri
from kubelet.cmd.options import KubeletFlags, KubeletServer
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.images import BUSYBOX_REF
from tests.integration.core.conftest import Node, _node

pytestmark = pytest.mark.containerd


def _flavor(containerd: Any) -> str:
    return str(containerd.flavor)


async def test_runtime_config_names_the_cgroup_driver(containerd) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(containerd.endpoint, 10)
    try:
        if _flavor(containerd) == "1.6":
            with pytest.raises(errors.UnimplementedError):
                await rt.runtime_config()
            return
        resp = await rt.runtime_config()
        assert resp.linux.cgroup_driver == pb.CGROUPFS  # SystemdCgroup = false
        # The kubelet takes it over its own cgroupDriver (KubeletCgroupDriverFromCRI).
        s = KubeletServer(KubeletFlags(), KubeletConfiguration(cgroup_driver="systemd"))
        await cgroup_driver_from_cri(s, rt)
        assert s.config.cgroup_driver == "cgroupfs"
        version = await rt.version()
        assert version.runtime_name == "containerd" and version.runtime_version.startswith("v2.")
    finally:
        await rt.close()


@pytest.fixture
async def evented_ctd_node(containerd, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    # A relist too slow to notice anything within the test: events must.
    async for n in _node(
        containerd, tmp_path, pleg_relist_period=60.0, feature_gates={"EventedPLEG": True}
    ):
        yield n


async def test_evented_pleg_on_containerd(evented_ctd_node, containerd) -> None:  # type: ignore[no-untyped-def]
    node = evented_ctd_node
    node.write(
        "ev", [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", "sleep 1; exit 1"]}]
    )
    if _flavor(containerd) == "1.6":
        # No stream: the relist takes over at once, at its configured period.
        def fell_back() -> bool:
            return node.kubelet.evented is not None and node.kubelet.evented.fell_back

        await node.wait(fell_back, timeout=30, what="fallback")
        assert node.kubelet.pleg.period == 60.0
        return
    await node.wait(
        lambda: node.container("ev", "c")["restartCount"] >= 2, timeout=90, what="restarts"
    )
    evented = node.kubelet.evented
    assert evented is not None and evented.events_seen >= 4 and not evented.fell_back
    # The relist ran at start only (its period is 300 s while events flow).
    assert node.kubelet.pleg.relists <= 2 and node.kubelet.pleg.period == 300.0


@pytest.fixture
async def qos_ctd_node(containerd, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    async for n in _node(
        containerd, tmp_path, cgroups_per_qos=True, cgroup_root="/kpy-rt2-test", fail_swap_on=False
    ):
        yield n


def _memory_dir(pid: int) -> str | None:
    with open(f"/proc/{pid}/cgroup") as fh:
        for line in fh:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrls.split(","):
                return f"/sys/fs/cgroup/memory{path}"
    return None


async def test_swap_limit_and_pressure_of_a_real_container(qos_ctd_node) -> None:  # type: ignore[no-untyped-def]
    """NoSwap on this cgroup v1 host: runc sets memory+swap to the memory limit.
    And the pod's pressure, read from the unified tree of this hybrid host,
    reaches /stats/summary."""
    node = qos_ctd_node
    if not os.path.exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"):
        pytest.skip("no memory.memsw (swap accounting off, or cgroup v2)")
    limits = {"limits": {"memory": "64Mi"}, "requests": {"memory": "32Mi"}}
    node.write(
        "sw", [{"name": "c", "image": BUSYBOX_REF, "command": ["sleep", "infinity"],
                "resources": limits}],
    )  # fmt: skip
    await node.wait(lambda: node.phase("sw") == "Running", timeout=90, what="Running")
    cid = node.container("sw", "c")["containerID"].split("://")[1]
    info = (await node.rt.container_status(cid, verbose=True)).info
    pid = json.loads(info["info"])["pid"]
    mem = _memory_dir(pid)
    assert mem is not None
    with open(f"{mem}/memory.limit_in_bytes") as fh:
        assert int(fh.read()) == 64 << 20
    with open(f"{mem}/memory.memsw.limit_in_bytes") as fh:
        assert int(fh.read()) == 64 << 20
    node.kubelet.stats.invalidate()
    s = node.kubelet.stats.summary()
    (pod,) = [p for p in s["pods"] if p["podRef"]["name"] == "sw-node-a"]
    assert pod["swap"]["swapUsageBytes"] == 0
    (ctr,) = pod["containers"]
    assert ctr["swap"]["swapAvailableBytes"] == 64 << 20  # memsw limit less swap in use
    if os.path.isdir("/sys/fs/cgroup/unified/kubepods") or os.path.isdir(
        "/sys/fs/cgroup/unified/kpy-rt2-test"
    ):
        assert "psi" in pod["cpu"] and "psi" in ctr["memory"] and "io" in ctr
        assert pod["cpu"]["psi"]["some"]["total"] >= 0
    assert "psi" in s["node"]["cpu"]  # /proc/pressure
