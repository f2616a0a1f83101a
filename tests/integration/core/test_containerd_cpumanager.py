"""The static CPU manager on a real containerd with runc, on this 2-CPU machine:
reservedSystemCPUs=0 leaves CPU 1 to hand out. A Guaranteed pod asking for
one CPU gets cpuset 1; the shared pool (BestEffort containers) shrinks to 0
while it runs and grows back to 0-1 once it is gone. Read from the
containers' own cgroups (cpuset.cpus) and the kernel's view of the process
(Cpus_allowed_list)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.cm.sysinfo import discover
from kubelet.testing.images import BUSYBOX_REF
from tests.integration.core.conftest import Node, _node

pytestmark = pytest.mark.containerd

SLEEP = ["sh", "-c", "sleep infinity"]


@pytest.fixture
async def static_node(containerd, tmp_path: Path) -> AsyncIterator[Node]:  # type: ignore[no-untyped-def]
    if discover().num_cores < 2:
        pytest.fail("the static CPU manager test needs at least 2 CPUs")
    async for n in _node(
        containerd,
        tmp_path,
        cgroups_per_qos=True,
        cpu_manager_policy="static",
        reserved_system_cpus="0",
        cpu_manager_reconcile_period=0.5,
    ):
        yield n


async def cgroup_of(node: Node, pod: str, name: str, controller: str) -> tuple[int, Path]:
    """The container's main process and its cgroup directory in a v1 hierarchy."""
    cid = node.container(pod, name)["containerID"].split("://")[1]
    info = (await node.rt.container_status(cid, verbose=True)).info
    pid = json.loads(info["info"])["pid"]
    with open(f"/proc/{pid}/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                mount = "cpu,cpuacct" if controller == "cpu" else controller
                base = Path(f"/sys/fs/cgroup/{mount}")
                if not base.exists():
                    base = Path(f"/sys/fs/cgroup/{controller}")
                return pid, Path(f"{base}{path}")
    raise AssertionError(f"no {controller} cgroup (cgroup v1 expected here)")


async def cfs_quota(node: Node, pod: str, name: str) -> tuple[int, int]:
    """cpu.cfs_quota_us of the container's cgroup and of its pod's."""
    _, d = await cgroup_of(node, pod, name, "cpu")
    return int((d / "cpu.cfs_quota_us").read_text()), int(
        (d.parent / "cpu.cfs_quota_us").read_text()
    )


async def container_cpus(node: Node, pod: str, name: str) -> tuple[str, str]:
    """(cpuset.cpus of the container's cgroup, Cpus_allowed_list of its process)."""
    pid, d = await cgroup_of(node, pod, name, "cpuset")
    cpus = (d / "cpuset.cpus").read_text().strip()
    allowed = ""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("Cpus_allowed_list:"):
                allowed = line.split(":", 1)[1].strip()
    return cpus, allowed


def guaranteed(cpu: str) -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "64Mi"}
    return {
        "name": "c",
        "image": BUSYBOX_REF,
        "command": SLEEP,
        "resources": {"requests": res, "limits": res},
    }


async def test_static_policy_pins_guaranteed_and_moves_the_shared_pool(static_node: Node) -> None:
    node = static_node
    state_file = Path(node.kubelet.root_dir) / "cpu_manager_state"
    assert json.loads(state_file.read_text())["defaultCpuSet"] == "0-1"

    node.write("shared", [{"name": "c", "image": BUSYBOX_REF, "command": SLEEP}])
    await node.wait(
        lambda: node.phase("shared") == "Running", timeout=90, what="BestEffort Running"
    )
    assert await container_cpus(node, "shared", "c") == ("0-1", "0-1")

    path = node.write("pinned", [guaranteed("1")])
    await node.wait(
        lambda: node.phase("pinned") == "Running", timeout=90, what="Guaranteed Running"
    )
    assert await container_cpus(node, "pinned", "c") == ("1", "1")
    # DisableCPUQuotaWithExclusiveCPUs: no CFS quota on the pinned container nor its pod.
    assert await cfs_quota(node, "pinned", "c") == (-1, -1)
    uid = node.pod("pinned")["metadata"]["uid"]
    doc = json.loads(state_file.read_text())
    assert (doc["defaultCpuSet"], doc["entries"]) == ("0", {uid: {"c": "1"}})

    # The reconcile loop takes CPU 1 away from the shared container.
    async def shared_is(cpus: str) -> bool:
        return await container_cpus(node, "shared", "c") == (cpus, cpus)

    await wait_async(node, lambda: shared_is("0"), "shared pool shrunk to 0")

    # A second Guaranteed pod cannot have CPU 0 (reserved) nor 1 (taken).
    node.write("nomore", [guaranteed("1")])
    await node.wait(lambda: node.phase("nomore") == "Failed", timeout=60, what="second pod refused")
    st = node.pod("nomore")["status"]
    assert st["reason"] == "UnexpectedAdmissionError"
    assert "not enough cpus available to satisfy request: requested=1, available=0" in st["message"]

    # A Guaranteed pod with a fractional CPU runs on the shared pool, quota kept.
    node.write("fraction", [guaranteed("500m")])
    await node.wait(lambda: node.phase("fraction") == "Running", timeout=90, what="500m Running")
    assert await container_cpus(node, "fraction", "c") == ("0", "0")
    assert await cfs_quota(node, "fraction", "c") == (50000, 50000)

    path.unlink()
    await node.wait(lambda: node.pod("pinned") is None, timeout=90, what="Guaranteed pod gone")
    await wait_async(node, lambda: shared_is("0-1"), "shared pool back to 0-1")
    assert json.loads(state_file.read_text())["defaultCpuSet"] == "0-1"


async def wait_async(node: Node, pred: Any, what: str, timeout: float = 30.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await pred():
                return
        except (KeyError, OSError, AssertionError):
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
