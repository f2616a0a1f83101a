"""ResourceHealthStatus for device plugin resources: the index of who holds
each device (the same answers as a walk over every allocation), each
container's allocatedResourcesStatus, and the pods told when a plugin changes
a device's health (only the holders, once each) — against real plugins over
the v1beta1 protocol, as the node e2e "Device Plugin Failures Pod Status"
specs drive them."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
from kubelet.cm.devicemanager.health import UNKNOWN, device_health, resources_status
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.devicemanager.pod_devices import Allocation, PodDevices
from kubelet.cm.resource_managers import ResourceManagerConfig, new_resource_managers
from kubelet.features import FeatureGate
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.wait import wait_for_async
from kubelet.util import cpuset
from kubelet.util.clock import FakeClock
from tests.unit.cm.fixtures import Pods, R, counts, gpu_pod, held, machine, registered

# ------------------------------------------------------------------ the index

Op = tuple[str, str, str, str, list[str]]
_ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "set_ids", "delete"]),
        st.sampled_from(["p1", "p2", "p3"]),
        st.sampled_from(["a", "b"]),
        st.sampled_from([R, "example.com/nic"]),
        st.lists(st.sampled_from(["0", "1", "2", "3"]), max_size=3, unique=True),
    ),
    max_size=30,
)


def _walk_in_use(pd: PodDevices, resource: str, skip: set[tuple[str, str]]) -> set[str]:
    return {
        d
        for u, cs in pd.pods.items()
        for name, rs in cs.items()
        if (u, name) not in skip and resource in rs
        for d in rs[resource].ids
    }


def _walk_holders(pd: PodDevices, resource: str, device: str) -> set[str]:
    return {
        u
        for u, cs in pd.pods.items()
        for rs in cs.values()
        if resource in rs and device in rs[resource].ids
    }


@given(_ops)
def test_the_index_answers_as_a_walk_over_every_allocation(ops: list[Op]) -> None:
    pd = PodDevices()
    for op, u, c, r, ids in ops:
        if op == "insert":
            pd.insert(u, c, r, Allocation(ids))
        elif op == "set_ids" and (alloc := pd.get(u, c, r)) is not None:
            pd.set_ids(u, c, r, alloc, Allocation(ids))
        elif op == "delete":
            pd.delete(u)
    for r in (R, "example.com/nic"):
        assert set(pd.held(r)) == _walk_in_use(pd, r, set())
        for skip in (set(), {("p1", "a")}, {("p2", "b"), ("p3", "a")}):
            assert pd.in_use(r, skip) == _walk_in_use(pd, r, skip)
        for d in ("0", "1", "2", "3"):
            assert pd.holders(r, d) == _walk_holders(pd, r, d)


def test_a_preference_for_an_allocation_no_longer_held_leaves_the_index_alone() -> None:
    pd = PodDevices()
    old = Allocation(["0"])
    pd.insert("p1", "a", R, old)
    pd.delete("p1")
    pd.insert("p2", "a", R, Allocation(["1"]))
    pd.set_ids("p1", "a", R, old, Allocation(["1"]))  # the pod went meanwhile
    assert pd.holders(R, "1") == {"p2"} and pd.holders(R, "0") == set()


# ---------------------------------------------------------------- conversion


def test_device_health_is_unknown_without_a_current_list() -> None:
    assert device_health(True, {"0"}, {"1"}, "0") == HEALTHY
    assert device_health(True, {"0"}, {"1"}, "1") == UNHEALTHY
    assert device_health(True, {"0"}, {"1"}, "2") == UNKNOWN  # no longer listed
    assert device_health(False, {"0"}, {"1"}, "0") == UNKNOWN  # plugin gone


def test_resources_status_is_the_api_shape_sorted() -> None:
    health = {("b.com/x", "9"): UNHEALTHY}
    out = resources_status(
        {"b.com/x": ["9", "10"], "a.com/y": ["1"], "c.com/z": []},
        lambda r, d: health.get((r, d), HEALTHY),
    )
    assert out == [
        {"name": "a.com/y", "resources": [{"resourceID": "1", "health": HEALTHY}]},
        {
            "name": "b.com/x",
            "resources": [
                {"resourceID": "10", "health": HEALTHY},
                {"resourceID": "9", "health": UNHEALTHY},
            ],
        },
    ]


# ----------------------------------------------------------- the manager


@pytest.fixture
async def env() -> AsyncIterator[tuple[DeviceManager, list[str]]]:
    root = tempfile.mkdtemp(prefix="dh", dir="/tmp")
    told: list[str] = []
    mgr = DeviceManager(root, clock=FakeClock(), health_changed=told.append)
    await mgr.start()
    try:
        yield mgr, told
    finally:
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


def status_of(mgr: DeviceManager, pod_uid: str, name: str = "c0") -> dict[str, str]:
    [entry] = mgr.allocated_resources_status(pod_uid, name)
    assert entry["name"] == R
    return {h["resourceID"]: h["health"] for h in entry["resources"]}


async def until(what: str, pred: object) -> None:
    await wait_for_async(what, pred, 20, every=0.01, retry_on=())  # type: ignore[arg-type]


async def test_a_health_change_tells_the_holding_pods_once_each(env) -> None:
    mgr, told = env
    plugin = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY, "2": HEALTHY})
    await registered(mgr.socket_dir, mgr, plugin)
    one, two = gpu_pod("one", 1, 1), gpu_pod("two", 1)
    assert mgr.admit(one) is None and mgr.admit(two) is None
    a, b = held(mgr, one, "c0")[0], held(mgr, one, "c1")[0]
    [c] = held(mgr, two)
    assert status_of(mgr, "uid-one") == {a: HEALTHY}
    assert mgr.allocated_resources_status("uid-one", "nope") == []
    assert told == []
    # Both of pod one's devices turn unhealthy: pod one is told once, two never.
    plugin.update({a: UNHEALTHY, b: UNHEALTHY, c: HEALTHY})
    await until("pod one told", lambda: told == ["uid-one"])
    assert status_of(mgr, "uid-one") == {a: UNHEALTHY}
    assert status_of(mgr, "uid-one", "c1") == {b: UNHEALTHY}
    assert status_of(mgr, "uid-two") == {c: HEALTHY}
    # The same health again is no news.
    plugin.update({a: UNHEALTHY, b: UNHEALTHY, c: HEALTHY, "3": HEALTHY})
    await until("the new device listed", lambda: counts(mgr) == (4, 2))
    assert told == ["uid-one"]
    # A held device the plugin no longer lists: Unknown.
    plugin.update({a: UNHEALTHY, b: UNHEALTHY})
    await until("pod two told", lambda: told == ["uid-one", "uid-two"])
    assert status_of(mgr, "uid-two") == {c: UNKNOWN}
    await plugin.stop()


async def test_a_stopped_plugin_makes_its_devices_unknown_until_it_lists_again(env) -> None:
    mgr, told = env
    plugin = FakeDevicePlugin({"0": HEALTHY})
    await registered(mgr.socket_dir, mgr, plugin)
    pod = gpu_pod("p", 1)
    assert mgr.admit(pod) is None
    await plugin.stop()
    await until("told", lambda: told == ["uid-p"])
    assert status_of(mgr, "uid-p") == {"0": UNKNOWN}
    again = FakeDevicePlugin({"0": HEALTHY})
    await again.register(mgr.socket_dir, "p2.sock", R)
    await until("told again", lambda: told == ["uid-p", "uid-p"])
    assert status_of(mgr, "uid-p") == {"0": HEALTHY}
    await again.stop()


async def test_released_devices_tell_nobody() -> None:
    root = tempfile.mkdtemp(prefix="dh", dir="/tmp")
    told: list[str] = []
    mgr = DeviceManager(root, clock=FakeClock(), health_changed=told.append)
    await mgr.start()
    plugin = FakeDevicePlugin({"0": HEALTHY})
    try:
        await registered(mgr.socket_dir, mgr, plugin)
        pod = gpu_pod("p", 1)
        assert mgr.admit(pod) is None
        mgr.remove_pod("uid-p")
        plugin.update({"0": UNHEALTHY})
        await until("listed", lambda: counts(mgr) == (1, 0))
        assert told == [] and mgr.allocated_resources_status("uid-p", "c0") == []
    finally:
        await plugin.stop()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("on", [True, False])
async def test_the_gate_decides_whether_the_manager_tells(on: bool) -> None:
    root = tempfile.mkdtemp(prefix="dh", dir="/tmp")
    told: list[str] = []
    rm = new_resource_managers(
        KubeletConfiguration(),
        ResourceManagerConfig(machine(), {}, root, cpuset.EMPTY),
        FeatureGate({"ResourceHealthStatus": on}),
        Pods(),
        lambda: True,
        device_health_changed=told.append,
    )
    plugin = FakeDevicePlugin({"0": HEALTHY})
    await rm.devices.start()
    try:
        await registered(rm.devices.socket_dir, rm.devices, plugin)
        assert rm.admit(gpu_pod("p", 1)) is None
        plugin.update({"0": UNHEALTHY})
        await until("listed", lambda: counts(rm.devices) == (1, 0))
        assert told == (["uid-p"] if on else [])
    finally:
        await plugin.stop()
        await rm.devices.stop()
        shutil.rmtree(root, ignore_errors=True)
