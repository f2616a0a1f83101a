"""Container swap settings (memorySwap.swapBehavior) as upstream's
kuberuntime_container_linux.go computes them, on both cgroup versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime import swap as sw
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.testing.helpers import standalone_runtime_helper

GiB = 1 << 30
NODE = sw.SwapConfig("LimitedSwap", True, True, node_memory=16 * GiB, swap_capacity=4 * GiB)


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": list(containers), **spec},
    }


def ctr(req: str | None = None, lim: str | None = None, cpu: str | None = None) -> dict[str, Any]:
    res: dict[str, dict[str, str]] = {}
    if req:
        res.setdefault("requests", {})["memory"] = req
    if lim:
        res.setdefault("limits", {})["memory"] = lim
    if cpu:
        res.setdefault("requests", {})["cpu"] = cpu
    return {"name": "c", "image": "i", "resources": res}


def test_limited_swap_is_the_request_share_of_the_node_swap() -> None:
    assert sw.limited_swap(4 * GiB, 16 * GiB, 4 * GiB) == GiB
    assert sw.limited_swap(1000, 3000, 1000) == 333  # rounded down
    with pytest.raises(ValueError, match="total node memory is 0"):
        sw.limited_swap(1, 0, GiB)
    with pytest.raises(ValueError, match="larger than total node memory"):
        sw.limited_swap(17 * GiB, 16 * GiB, GiB)


@pytest.mark.parametrize(
    ("p", "c", "want"),
    [
        # Burstable, request below the limit: LimitedSwap.
        (pod(ctr("1Gi", "2Gi")), ctr("1Gi", "2Gi"), "LimitedSwap"),
        (pod(ctr("1Gi")), ctr("1Gi"), "LimitedSwap"),
        # Burstable pod, but this container's request equals its limit.
        (pod(ctr("1Gi", "1Gi"), ctr(cpu="100m")), ctr("1Gi", "1Gi"), "NoSwap"),
        # Burstable pod, this container asks no memory at all.
        (pod(ctr(cpu="100m")), ctr(cpu="100m"), "NoSwap"),
        (pod(ctr()), ctr(), "NoSwap"),  # BestEffort
        # A critical pod never swaps.
        (pod(ctr("1Gi", "2Gi"), priority=2_000_000_000), ctr("1Gi", "2Gi"), "NoSwap"),
    ],
)
def test_which_containers_get_limited_swap(p: dict[str, Any], c: dict[str, Any], want: str) -> None:
    assert sw.container_swap_behavior(NODE, p, c) == want


def test_static_pods_cgroup_v1_and_no_controller_mean_no_swap() -> None:
    p = pod(ctr("1Gi", "2Gi"))
    static = {**p, "metadata": {**p["metadata"], "annotations": {"kubernetes.io/config.source": "file"}}}  # fmt: skip
    assert sw.container_swap_behavior(NODE, static, ctr("1Gi", "2Gi")) == "NoSwap"
    for cfg in (
        sw.SwapConfig("LimitedSwap", False, True, 16 * GiB, 4 * GiB),
        sw.SwapConfig("LimitedSwap", True, False, 16 * GiB, 4 * GiB),
        sw.SwapConfig("NoSwap", True, True, 16 * GiB, 4 * GiB),
        sw.SwapConfig("", True, True, 16 * GiB, 4 * GiB),
    ):
        assert sw.container_swap_behavior(cfg, p, ctr("1Gi", "2Gi")) == "NoSwap"


def test_cri_fields_on_each_cgroup_version() -> None:
    p = pod(ctr("4Gi", "8Gi"))
    out = pb.LinuxContainerResources(memory_limit_in_bytes=8 * GiB)
    sw.configure(NODE, out, p, ctr("4Gi", "8Gi"))
    assert (
        dict(out.unified) == {"memory.swap.max": str(GiB)} and out.memory_swap_limit_in_bytes == 0
    )
    # NoSwap on v2: an explicit zero, not the runtime's default.
    out = pb.LinuxContainerResources(memory_limit_in_bytes=8 * GiB)
    sw.configure(
        sw.SwapConfig("NoSwap", True, True, 16 * GiB, 4 * GiB), out, p, p["spec"]["containers"][0]
    )
    assert dict(out.unified) == {"memory.swap.max": "0"}
    # v1 with the memsw controller: memory+swap capped at the memory limit.
    out = pb.LinuxContainerResources(memory_limit_in_bytes=8 * GiB)
    sw.configure(sw.SwapConfig("", False, True, 16 * GiB, 0), out, p, p["spec"]["containers"][0])
    assert out.memory_swap_limit_in_bytes == 8 * GiB and not out.unified
    # No swap controller: nothing at all.
    out = pb.LinuxContainerResources(memory_limit_in_bytes=8 * GiB)
    sw.configure(sw.SwapConfig("", False, False, 16 * GiB, 0), out, p, p["spec"]["containers"][0])
    assert out.memory_swap_limit_in_bytes == 0 and not out.unified
    # A request past the node's memory: logged, and no swap.
    big = pod(ctr("32Gi", "64Gi"))
    out = pb.LinuxContainerResources()
    sw.configure(NODE, out, big, big["spec"]["containers"][0])
    assert dict(out.unified) == {"memory.swap.max": "0"}


def test_swap_controller_detection(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    assert not sw.swap_controller(False, mount=str(tmp_path))
    (tmp_path / "memory" / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    assert sw.swap_controller(False, mount=str(tmp_path))
    # v2: memory.swap.max in the kubelet's own cgroup (the root has none).
    self_cg = tmp_path / "self-cgroup"
    self_cg.write_text("0::/system.slice/kubelet.service\n")
    own = tmp_path / "system.slice" / "kubelet.service"
    own.mkdir(parents=True)
    assert not sw.swap_controller(True, str(self_cg), str(tmp_path))
    (own / "memory.swap.max").write_text("max\n")
    assert sw.swap_controller(True, str(self_cg), str(tmp_path))


def test_the_runtime_manager_puts_them_in_the_container_config(tmp_path: Path) -> None:
    rm = RuntimeManager(
        FakeRuntimeService(), FakeImageService([]), standalone_runtime_helper(str(tmp_path)),
        str(tmp_path), node=NodeSettings(node_memory=16 * GiB, swap=NODE),
    )  # fmt: skip
    p = pod(ctr("2Gi", "4Gi"))
    r = rm.resources(p, p["spec"]["containers"][0])
    assert r.memory_limit_in_bytes == 4 * GiB and r.unified["memory.swap.max"] == str(GiB // 2)
