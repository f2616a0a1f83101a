"""Device plugin resources as a topology manager hint provider: the hints
(generateDeviceTopologyHints), NUMA-aware picks (filterByAffinity,
devicesToAllocate) and the topology manager admitting or refusing pods whose
devices and exclusive CPUs sit on different NUMA nodes. Fake machine: two
NUMA nodes; plugins list devices on node 0, node 1 and without topology."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.devicemanager.topology_hints import choose, filter_by_affinity, generate_hints
from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import TopologyHint
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.util import cpuset
from tests.unit.cm.fixtures import (
    Affinity,
    Pods,
    R,
    cpu_gpu_pod,
    gpu_pod,
    held,
    numa_managers,
    registered,
    serving_devices,
)

NODE0 = {"a": [0], "b": [0]}
NODE1 = {"c": [1], "d": [1]}
TWO = {**NODE0, **NODE1}


def h(bits: list[int], preferred: bool) -> TopologyHint:
    return TopologyHint(bitmask.new_bitmask(bits), preferred)


# --------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("available", "reusable", "need", "want"),
    [
        # One device: either node alone, both nodes not preferred.
        ("abcd", "", 1, [h([0], True), h([1], True), h([0, 1], False)]),
        ("abcd", "", 2, [h([0], True), h([1], True), h([0, 1], False)]),
        # Three devices only fit across both nodes: that is then the narrowest.
        ("abcd", "", 3, [h([0, 1], True)]),
        # "a" is taken: node 0 alone no longer fits 2, but could have (so the
        # two-node hint stays not preferred).
        ("bcd", "", 2, [h([1], True), h([0, 1], False)]),
        # A reusable device on node 0 rules out masks without node 0.
        ("cd", "a", 2, [h([0, 1], False)]),
        ("bcd", "a", 2, [h([0], True), h([0, 1], False)]),
    ],
)
def test_hints_cover_the_masks_with_enough_free_devices(
    available: str, reusable: str, need: int, want: list[TopologyHint]
) -> None:
    assert generate_hints([0, 1], TWO, set(available), set(reusable), need) == want


def test_devices_without_topology_never_satisfy_a_mask() -> None:
    numa = {**NODE0, "x": [], "y": []}
    assert generate_hints([0, 1], numa, {"a", "x", "y"}, set(), 2) == []
    assert generate_hints([0, 1], numa, {"a", "b", "x"}, set(), 2) == [
        h([0], True),
        h([0, 1], False),
    ]


def test_a_made_up_numa_id_is_in_no_mask() -> None:
    assert generate_hints([0, 1], {"a": [99], "b": [0]}, {"a", "b"}, set(), 1) == [
        h([0], True),
        h([0, 1], False),
    ]


def test_filter_by_affinity_orders_chosen_nodes_then_others_then_no_topology() -> None:
    numa = {**TWO, "e": [1], "x": []}
    split = filter_by_affinity(numa, bitmask.new_bitmask([1]), "abcdex")
    assert split == (["c", "d", "e"], ["a", "b"], ["x"])
    # No affinity (or no topology at all): every device is as good as any.
    assert filter_by_affinity(numa, None, "xba") == ([], [], ["a", "b", "x"])
    assert filter_by_affinity({"a": [], "b": []}, 1, "ab") == ([], [], ["a", "b"])
    # A device on both nodes is filed once, under the affinity's node.
    both = filter_by_affinity({"a": [0, 1], "b": [0]}, bitmask.new_bitmask([1]), "ab")
    assert both == (["a"], ["b"], [])
    assert choose(3, [["c"], ["c", "a"], ["b", "d"]]) == ["c", "a", "b"]


# ------------------------------------------------------ the device manager


PLUGINS: list[FakeDevicePlugin] = []


@pytest.fixture
async def dm() -> AsyncIterator[tuple[DeviceManager, Affinity]]:
    root = tempfile.mkdtemp(prefix="dt", dir="/tmp")
    affinity = Affinity()
    mgr = DeviceManager(root, numa_nodes=[0, 1], affinity=affinity)
    await mgr.start()
    try:
        yield mgr, affinity
    finally:
        while PLUGINS:
            await PLUGINS.pop().stop()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


async def plugin_with(
    mgr: DeviceManager, numa: dict[str, list[int]], **kw: Any
) -> FakeDevicePlugin:
    """A plugin listing these devices, stopped when the test ends."""
    plugin = FakeDevicePlugin(dict.fromkeys(numa, HEALTHY), numa=numa, **kw)
    PLUGINS.append(plugin)
    await registered(mgr.socket_dir, mgr, plugin)
    return plugin


async def test_container_hints_by_resource(dm) -> None:
    mgr, _ = dm
    await plugin_with(mgr, TWO)
    pod = gpu_pod("p", 2)
    c = pod["spec"]["containers"][0]
    assert mgr.get_topology_hints(pod, c) == {R: [h([0], True), h([1], True), h([0, 1], False)]}
    # Not a device plugin resource: not the device manager's to answer.
    c["resources"]["limits"]["other.io/x"] = "1"
    assert set(mgr.get_topology_hints(pod, c) or {}) == {R}
    assert mgr.get_topology_hints(
        gpu_pod("big", 5), gpu_pod("big", 5)["spec"]["containers"][0]
    ) == {R: []}  # not enough devices: nothing fits


async def test_devices_without_topology_have_no_preference(dm) -> None:
    mgr, _ = dm
    await plugin_with(mgr, {"x": [], "y": []})
    pod = gpu_pod("p", 1)
    assert mgr.get_topology_hints(pod, pod["spec"]["containers"][0]) == {R: None}
    assert mgr.get_pod_topology_hints(pod) == {R: None}


async def test_held_devices_give_the_same_hints_again(dm) -> None:
    mgr, _ = dm
    await plugin_with(mgr, TWO)
    pod = gpu_pod("p", 2)
    c = pod["spec"]["containers"][0]
    assert mgr.admit(pod) is None and held(mgr, pod) == ["a", "b"]
    # Re-admitted (a kubelet restart): the hints of what it holds, even though
    # nothing is free on node 0 any more.
    assert mgr.get_topology_hints(pod, c) == {R: [h([0], True), h([0, 1], False)]}
    c["resources"]["limits"][R] = "1"  # a request that no longer matches
    assert mgr.get_topology_hints(pod, c) == {R: []}
    other = gpu_pod("q", 2)
    assert mgr.get_topology_hints(other, other["spec"]["containers"][0]) == {
        R: [h([1], True), h([0, 1], False)]
    }


async def test_pod_hints_count_the_whole_pod(dm) -> None:
    mgr, _ = dm
    await plugin_with(mgr, TWO)
    # 1 + 1 app containers, a 2-device init container: the pod needs 2.
    pod = gpu_pod("p", 1, 1, init=(2,))
    assert mgr.get_pod_topology_hints(pod) == {R: [h([0], True), h([1], True), h([0, 1], False)]}
    assert mgr.get_pod_topology_hints(gpu_pod("q", 2, 1)) == {R: [h([0, 1], True)]}


async def test_reused_init_devices_steer_the_app_containers_hints(dm) -> None:
    mgr, _ = dm
    await plugin_with(mgr, TWO)
    pod = gpu_pod("p", 2, init=(1,))
    init, app = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
    mgr.allocate(pod, init)
    assert held(mgr, pod, "init0") == ["a"]
    # "a" will be reused: only masks with node 0 are hints for the app container.
    assert mgr.get_topology_hints(pod, app) == {R: [h([0], True), h([0, 1], False)]}


async def test_allocation_takes_the_chosen_nodes_devices_first(dm) -> None:
    mgr, affinity = dm
    await plugin_with(mgr, {**TWO, "e": [1], "x": []})
    pod = gpu_pod("p", 2)
    affinity.hints[("uid-p", "c0")] = h([1], True)
    assert mgr.admit(pod) is None and held(mgr, pod) == ["c", "d"]
    assert mgr.container_devices("uid-p", "c0") == {R: {"c": [1], "d": [1]}}
    # Node 1 has one left: it goes first, then the smallest other node's.
    more = gpu_pod("q", 3)
    affinity.hints[("uid-q", "c0")] = h([1], False)
    assert mgr.admit(more) is None and held(mgr, more) == ["e", "a", "b"]
    # Without an affinity: whatever is free, the device without topology here.
    last = gpu_pod("r", 1)
    assert mgr.admit(last) is None and held(mgr, last) == ["x"]


async def test_preferred_allocation_is_asked_among_the_aligned_devices(dm) -> None:
    mgr, affinity = dm
    opts = pb.DevicePluginOptions(get_preferred_allocation_available=True)
    plugin = await plugin_with(mgr, {**TWO, "e": [1]}, options=opts, preferred=["a", "e", "d", "c"])
    pod = gpu_pod("p", 2)
    affinity.hints[("uid-p", "c0")] = h([1], True)
    assert mgr.admit(pod) is None and held(mgr, pod) == ["c", "d"]
    await mgr.container_options(pod, pod["spec"]["containers"][0])
    # The plugin chose among node 1's devices only ("a" was not offered).
    assert held(mgr, pod) == ["e", "d"] and plugin.allocations == [["e", "d"]]


async def test_too_few_aligned_devices_keeps_them_and_the_plugin_picks_the_rest(dm) -> None:
    mgr, affinity = dm
    opts = pb.DevicePluginOptions(get_preferred_allocation_available=True)
    plugin = await plugin_with(mgr, TWO, options=opts, preferred=["b", "a", "c"])
    pod = gpu_pod("p", 3)
    affinity.hints[("uid-p", "c0")] = h([1], False)
    assert mgr.admit(pod) is None and held(mgr, pod) == ["c", "d", "a"]
    await mgr.container_options(pod, pod["spec"]["containers"][0])
    assert held(mgr, pod) == ["c", "d", "b"] and plugin.allocations == [["c", "d", "b"]]


# ------------------------------------------------- with the topology manager


@pytest.mark.parametrize("scope", ["container", "pod"])
async def test_single_numa_node_refuses_a_gpu_and_cpus_on_different_nodes(
    short_root, scope
) -> None:
    rm = numa_managers(short_root, "single-numa-node", scope)
    async with serving_devices(rm, {"g0": [1], "g1": [1]}):
        pod = cpu_gpu_pod("p", 1)
        refused = rm.admit(pod)
        assert refused is not None and refused.reason == "TopologyAffinityError"
        assert refused.message == "Resources cannot be allocated with Topology locality"
        # Nothing was allocated for it.
        assert held(rm.devices, pod) == [] and not rm.cpu.exclusive_cpus("uid-p", "c0")


async def test_single_numa_node_admits_a_gpu_next_to_its_cpus(short_root) -> None:
    pod = cpu_gpu_pod("p", 1)
    rm = numa_managers(short_root, "single-numa-node", pods=Pods(pod))
    async with serving_devices(rm, {"g0": [1], "g1": [0], "g2": [1]}):
        assert rm.admit(pod) is None
        assert held(rm.devices, pod) == ["g1"]  # on NUMA 0, with its CPU
        assert rm.cpu.exclusive_cpus("uid-p", "c0") <= cpuset.parse("0-1")
        assert rm.topology.get_affinity("uid-p", "c0") == h([0], True)
        # The one device on NUMA 0 is taken: the next such pod cannot fit.
        again = rm.admit(cpu_gpu_pod("q", 1))
        assert again is not None and again.reason == "TopologyAffinityError"


async def test_best_effort_admits_across_nodes_and_device_errors_stay_unexpected(
    short_root,
) -> None:
    pod = cpu_gpu_pod("p", 1)
    rm = numa_managers(short_root, "best-effort", pods=Pods(pod))
    health = {"g0": HEALTHY, "g1": UNHEALTHY}
    async with serving_devices(rm, {"g0": [1], "g1": [1]}, health):
        assert rm.admit(pod) is None and held(rm.devices, pod) == ["g0"]
        refused = rm.admit(cpu_gpu_pod("q", 1))
        assert refused is not None and refused.reason == "UnexpectedAdmissionError"
        assert "requested number of devices unavailable" in refused.message
