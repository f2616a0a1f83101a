"""The device manager against real plugins: grpc.aio device plugins served on
Unix sockets register on the manager's kubelet.sock, as the node e2e
"Device Plugin Failures" specs drive them."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.devicemanager import (
    CHECKPOINT_NAME,
    HEALTHY,
    KUBELET_SOCKET,
    UNHEALTHY,
    is_extended_resource_name,
)
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.api import api_pb2_grpc as pb_grpc
from kubelet.cm.devicemanager.manager import Capacity, DeviceManager
from kubelet.cm.devicemanager.pod_devices import AllocationError
from kubelet.cm.resource_managers import ResourceManagerConfig, new_resource_managers
from kubelet.cri.api import api_pb2 as cri
from kubelet.features import FeatureGate
from kubelet.metrics import REGISTRY
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.wait import wait_for_async
from kubelet.util import cpuset
from kubelet.util.clock import FakeClock
from tests.unit.cm.fixtures import Pods, R, counts, gpu_pod, held, machine, registered


@pytest.fixture
async def env() -> AsyncIterator[tuple[DeviceManager, str, FakeClock]]:
    # A short root: a Unix socket path has at most 107 bytes.
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    clock = FakeClock()
    mgr = DeviceManager(root, clock=clock)
    await mgr.start()
    try:
        yield mgr, mgr.socket_dir, clock
    finally:
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_devices_set_capacity_and_unhealthy_ones_leave_allocatable(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY, "2": HEALTHY, "3": HEALTHY})
    await plugin.register(sockdir, "p.sock", R)
    await wait_for_async(
        "counts(mgr) == (4, 4)", lambda: counts(mgr) == (4, 4), 20, every=0.01, retry_on=()
    )
    plugin.update({"0": HEALTHY, "1": UNHEALTHY, "2": HEALTHY, "3": UNHEALTHY})
    await wait_for_async(
        "counts(mgr) == (4, 2)", lambda: counts(mgr) == (4, 2), 20, every=0.01, retry_on=()
    )
    plugin.update({"0": HEALTHY, "1": HEALTHY, "2": HEALTHY, "3": UNHEALTHY})
    await wait_for_async(
        "counts(mgr) == (4, 3)", lambda: counts(mgr) == (4, 3), 20, every=0.01, retry_on=()
    )
    assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch"]
    assert REGISTRY.get_sample_value(
        "kubelet_device_plugin_registration_total", {"resource_name": R}
    )
    await plugin.stop()


async def test_a_change_wakes_the_node_status(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin({"0": HEALTHY})
    waiter = asyncio.ensure_future(mgr.capacity_changed())
    await plugin.register(sockdir, "p.sock", R)
    await asyncio.wait_for(waiter, 20)
    await wait_for_async(
        "counts(mgr) == (1, 1)", lambda: counts(mgr) == (1, 1), 20, every=0.01, retry_on=()
    )
    await mgr.capacity_changed()  # the list that came after: set again
    waiter = asyncio.ensure_future(mgr.capacity_changed())
    await asyncio.sleep(0.05)
    assert not waiter.done()  # nothing changed since
    plugin.update({"0": UNHEALTHY})
    await asyncio.wait_for(waiter, 20)
    await plugin.stop()


async def test_failing_options_refuse_the_registration(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"0": HEALTHY},
        fail=lambda m: "GetDevicePluginOptions failed" if m == "GetDevicePluginOptions" else None,
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await plugin.register(sockdir, "p.sock", R)
    assert "failed to get device plugin options" in str(err.value.details())
    assert "GetDevicePluginOptions failed" in str(err.value.details())
    await asyncio.sleep(0.1)
    assert plugin.calls == ["GetDevicePluginOptions"]
    assert counts(mgr) == (-1, -1)
    await plugin.stop()


async def test_list_and_watch_failing_at_once_leaves_the_resource_at_zero(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"0": HEALTHY}, fail=lambda m: "ListAndWatch failed" if m == "ListAndWatch" else None
    )
    await plugin.register(sockdir, "p.sock", R)
    await wait_for_async(
        "mgr.endpoints[R].stopped_at is not None",
        lambda: mgr.endpoints[R].stopped_at is not None,
        20,
        every=0.01,
        retry_on=(),
    )
    assert counts(mgr) == (0, 0)
    assert R not in mgr.capacity().removed
    await asyncio.sleep(0.2)
    assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch"]  # never retried
    await plugin.stop()


async def test_list_and_watch_failing_later_keeps_capacity_for_the_grace_period(env) -> None:
    mgr, sockdir, clock = env
    failing = False
    plugin = FakeDevicePlugin(
        {"0": HEALTHY, "1": HEALTHY},
        fail=lambda m: "ListAndWatch failed" if m == "ListAndWatch" and failing else None,
    )
    await plugin.register(sockdir, "p.sock", R)
    await wait_for_async(
        "counts(mgr) == (2, 2)", lambda: counts(mgr) == (2, 2), 20, every=0.01, retry_on=()
    )
    failing = True
    plugin.update(plugin.devices)
    await wait_for_async(
        "counts(mgr) == (2, 0)", lambda: counts(mgr) == (2, 0), 20, every=0.01, retry_on=()
    )
    await asyncio.sleep(0.2)
    assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch"]
    clock.step(299)
    assert counts(mgr) == (2, 0)
    clock.step(1)
    assert mgr.capacity() == Capacity({}, {}, [R])  # reported as 0 from now on
    assert mgr.capacity().removed == [R]
    await plugin.stop()


async def test_stopped_plugin_then_registered_again(env) -> None:
    mgr, sockdir, clock = env
    plugin = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY})
    await plugin.register(sockdir, "p.sock", R)
    await wait_for_async(
        "counts(mgr) == (2, 2)", lambda: counts(mgr) == (2, 2), 20, every=0.01, retry_on=()
    )
    await plugin.stop()
    await wait_for_async(
        "counts(mgr) == (2, 0)", lambda: counts(mgr) == (2, 0), 20, every=0.01, retry_on=()
    )
    clock.step(400)
    assert counts(mgr) == (0, 0) and mgr.capacity().removed == [R]
    again = FakeDevicePlugin({"0": HEALTHY})
    await again.register(sockdir, "q.sock", R)
    await wait_for_async(
        "counts(mgr) == (1, 1)", lambda: counts(mgr) == (1, 1), 20, every=0.01, retry_on=()
    )
    assert mgr.capacity().removed == []
    await again.stop()


async def test_registering_again_replaces_the_old_plugin_quietly(env) -> None:
    mgr, sockdir, _ = env
    first = FakeDevicePlugin({"0": HEALTHY})
    await first.register(sockdir, "a.sock", R)
    await wait_for_async(
        "counts(mgr) == (1, 1)", lambda: counts(mgr) == (1, 1), 20, every=0.01, retry_on=()
    )
    second = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY})
    await second.register(sockdir, "b.sock", R)
    await wait_for_async(
        "counts(mgr) == (2, 2)", lambda: counts(mgr) == (2, 2), 20, every=0.01, retry_on=()
    )
    await first.stop()  # the replaced stream ending is no news
    await asyncio.sleep(0.2)
    assert counts(mgr) == (2, 2)
    await second.stop()


@pytest.mark.parametrize(
    ("version", "resource", "endpoint", "want"),
    [
        ("v1alpha", R, "p.sock", 'requested API version "v1alpha" is not supported'),
        ("v1beta1", "cpu", "p.sock", 'the ResourceName "cpu" is invalid'),
        ("v1beta1", "kubernetes.io/gpu", "p.sock", "is invalid"),
        ("v1beta1", "requests.example.com/gpu", "p.sock", "is invalid"),
        ("v1beta1", R, "../p.sock", "is not a socket name"),
        ("v1beta1", R, "", "is not a socket name"),
    ],
)
async def test_bad_registrations_are_refused(env, version, resource, endpoint, want) -> None:
    mgr, sockdir, _ = env
    async with grpc.aio.insecure_channel("unix://" + os.path.join(sockdir, KUBELET_SOCKET)) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(version=version, endpoint=endpoint, resource_name=resource)
            )
    assert want in str(err.value.details())
    assert mgr.capacity() == Capacity({}, {}, [])


async def test_dial_failure_is_the_registration_error() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    mgr = DeviceManager(root, dial_timeout=0.2)
    await mgr.start()
    sockdir = mgr.socket_dir
    async with grpc.aio.insecure_channel("unix://" + os.path.join(sockdir, KUBELET_SOCKET)) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(version="v1beta1", endpoint="none.sock", resource_name=R)
            )
    assert "failed to dial device plugin" in str(err.value.details())
    await mgr.stop()
    shutil.rmtree(root, ignore_errors=True)


async def test_start_removes_stale_sockets_only() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    try:
        sockdir = os.path.join(root, "device-plugins")
        os.makedirs(sockdir)
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(os.path.join(sockdir, "old.sock"))
        stale.close()
        for keep in (CHECKPOINT_NAME, "DEPRECATION"):
            open(os.path.join(sockdir, keep), "w").close()
        os.mkdir(os.path.join(sockdir, "subdir"))
        mgr = DeviceManager(root)
        await mgr.start()
        try:
            names = sorted(os.listdir(sockdir))
            assert names == sorted([CHECKPOINT_NAME, "DEPRECATION", "subdir", KUBELET_SOCKET])
        finally:
            await mgr.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("example.com/gpu", True),
        ("nvidia.com/gpu", True),
        ("test.device/e2e-abc", True),
        ("gpu", False),
        ("cpu", False),
        ("kubernetes.io/gpu", False),
        ("requests.example.com/gpu", False),
        ("example.com/", False),
        ("example.com/a/b", False),
        ("example.com/-bad", False),
    ],
)
def test_extended_resource_names(name: str, ok: bool) -> None:
    assert is_extended_resource_name(name) is ok


# ------------------------------------------------------------- allocation


async def test_admission_picks_free_healthy_devices_and_refuses_when_none_left(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin({"a": HEALTHY, "b": HEALTHY, "c": UNHEALTHY})
    await registered(sockdir, mgr, plugin)
    one, two, three = gpu_pod("one", 1), gpu_pod("two", 1), gpu_pod("three", 1)
    assert mgr.admit(one) is None and held(mgr, one) == ["a"]
    assert mgr.admit(two) is None and held(mgr, two) == ["b"]
    refused = mgr.admit(three)
    assert refused is not None and refused.reason == "UnexpectedAdmissionError"
    assert refused.message == (
        "Allocate failed due to requested number of devices unavailable for "
        f"{R}. Requested: 1, Available: 0, which is unexpected"
    )
    assert held(mgr, three) == []
    mgr.remove_pod("uid-one")  # its devices are free again
    assert mgr.admit(three) is None and held(mgr, three) == ["a"]
    assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch"]  # Allocate waits
    await plugin.stop()


async def test_no_healthy_device_refuses_and_other_resources_are_not_ours(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin({"a": UNHEALTHY})
    await registered(sockdir, mgr, plugin)
    refused = mgr.admit(gpu_pod("p", 1))
    assert refused is not None and "no healthy devices present" in refused.message
    other = gpu_pod("q", 1)
    other["spec"]["containers"][0]["resources"]["limits"] = {"other.io/thing": "1"}
    assert mgr.admit(other) is None  # not a device plugin resource: the scheduler's
    await plugin.stop()


async def test_init_container_devices_are_reused_by_app_containers(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin({"a": HEALTHY, "b": HEALTHY})
    await registered(sockdir, mgr, plugin)
    pod = gpu_pod("p", 1, 1, init=(2,))
    assert mgr.admit(pod) is None
    assert held(mgr, pod, "init0") == ["a", "b"]
    assert sorted(held(mgr, pod, "c0") + held(mgr, pod, "c1")) == ["a", "b"]
    await plugin.stop()


async def test_allocate_once_and_its_answer_goes_into_the_cri_config(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"a": HEALTHY, "b": HEALTHY}, options=pb.DevicePluginOptions(pre_start_required=True)
    )
    await registered(sockdir, mgr, plugin)
    pod = gpu_pod("p", 2)
    assert mgr.admit(pod) is None
    c = pod["spec"]["containers"][0]
    allocs_before = (
        REGISTRY.get_sample_value(
            "kubelet_device_plugin_alloc_duration_seconds_count", {"resource_name": R}
        )
        or 0
    )
    cfg = cri.ContainerConfig(
        envs=[cri.KeyValue(key="DEVICES", value="mine")],
        mounts=[cri.Mount(container_path="/data", host_path="/v")],
    )
    (await mgr.container_options(pod, c)).apply(cfg)
    assert [(e.key, e.value) for e in cfg.envs] == [("DEVICES", "a,b"), ("DEVICES", "mine")]
    assert [m.container_path for m in cfg.mounts] == ["/dev-data/a", "/dev-data/b", "/data"]
    assert cfg.mounts[0].host_path == "/tmp/dev-a" and cfg.mounts[0].readonly
    assert [(d.container_path, d.host_path, d.permissions) for d in cfg.devices] == [
        ("/dev/fakea", "/dev/null", "rw"),
        ("/dev/fakeb", "/dev/null", "rw"),
    ]
    assert cfg.annotations["fake.example.com/devices"] == "a,b"
    assert [d.name for d in cfg.CDI_devices] == ["fake.example.com/dev=a", "fake.example.com/dev=b"]
    assert (
        REGISTRY.get_sample_value(
            "kubelet_device_plugin_alloc_duration_seconds_count", {"resource_name": R}
        )
        == allocs_before + 1
    )
    await mgr.container_options(pod, c)  # a restart: the kept answer, PreStart again
    assert plugin.allocations == [["a", "b"]]
    assert plugin.prestarts == [["a", "b"], ["a", "b"]]
    await plugin.stop()


async def test_a_failing_or_stopped_plugin_fails_the_container_start(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"a": HEALTHY, "b": HEALTHY}, fail=lambda m: "no luck" if m == "Allocate" else None
    )
    await registered(sockdir, mgr, plugin)
    pod = gpu_pod("p", 1)
    assert mgr.admit(pod) is None
    with pytest.raises(AllocationError, match=r"Allocate of example\.com/gpu failed: .*no luck"):
        await mgr.container_options(pod, pod["spec"]["containers"][0])
    await plugin.stop()
    await wait_for_async(
        "mgr.endpoints[R].stopped_at is not None",
        lambda: mgr.endpoints[R].stopped_at is not None,
        20,
        every=0.01,
        retry_on=(),
    )
    with pytest.raises(AllocationError, match="has been stopped"):
        await mgr.container_options(pod, pod["spec"]["containers"][0])


async def test_devices_of_pods_no_longer_active_are_released() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    one, two = gpu_pod("one", 1), gpu_pod("two", 1)
    active = Pods(one)
    mgr = DeviceManager(root, active)
    await mgr.start()
    plugin = FakeDevicePlugin({"a": HEALTHY})
    try:
        await registered(mgr.socket_dir, mgr, plugin)
        assert mgr.admit(one) is None
        assert mgr.admit(two) is not None  # one is active and holds the device
        del active.pods["uid-one"]  # it finished
        assert mgr.admit(two) is None and held(mgr, two) == ["a"]
    finally:
        await plugin.stop()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_the_resource_managers_serve_registration_until_stopped() -> None:
    """With the CPU manager's none policy (no reconcile loop) too: the node e2e
    run found kubelet.sock gone as soon as the CPU manager's run returned."""
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    try:
        rm = new_resource_managers(
            KubeletConfiguration(),
            ResourceManagerConfig(machine(), {}, root, cpuset.EMPTY),
            FeatureGate(),
            Pods(),
            lambda: True,
        )
        stop = asyncio.Event()
        task = asyncio.ensure_future(rm.run(stop, cast(Any, None)))
        sock = os.path.join(root, "device-plugins", KUBELET_SOCKET)
        await wait_for_async(
            "os.path.exists(sock)", lambda: os.path.exists(sock), 20, every=0.01, retry_on=()
        )
        await asyncio.sleep(0.2)
        plugin = FakeDevicePlugin({"0": HEALTHY})
        await plugin.register(os.path.dirname(sock), "p.sock", R)
        await wait_for_async(
            "counts(rm.devices) == (1, 1)",
            lambda: counts(rm.devices) == (1, 1),
            20,
            every=0.01,
            retry_on=(),
        )
        stop.set()
        await asyncio.wait_for(task, 20)
        assert not os.path.exists(sock)
        await plugin.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_the_plugins_preferred_devices_replace_the_picked_ones(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"a": HEALTHY, "b": HEALTHY, "c": HEALTHY},
        options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
        preferred=["zz", "c", "b"],
    )
    await registered(sockdir, mgr, plugin)
    pod = gpu_pod("p", 2)
    assert mgr.admit(pod) is None and held(mgr, pod) == ["a", "b"]
    await mgr.container_options(pod, pod["spec"]["containers"][0])
    assert held(mgr, pod) == ["c", "b"] and plugin.allocations == [["c", "b"]]
    other = gpu_pod("q", 1)
    assert mgr.admit(other) is None and held(mgr, other) == ["a"]
    await plugin.stop()


async def test_a_failing_preferred_allocation_fails_the_start(env) -> None:
    mgr, sockdir, _ = env
    plugin = FakeDevicePlugin(
        {"a": HEALTHY},
        options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
        fail=lambda m: "busy" if m == "GetPreferredAllocation" else None,
    )
    await registered(sockdir, mgr, plugin)
    pod = gpu_pod("p", 1)
    assert mgr.admit(pod) is None
    with pytest.raises(AllocationError, match=r"GetPreferredAllocation rpc failed.*busy"):
        await mgr.container_options(pod, pod["spec"]["containers"][0])
    assert plugin.allocations == []
    await plugin.stop()


async def test_a_server_that_cannot_start_fails_its_health_check() -> None:
    root = "/tmp/" + "d" * 110  # the socket path would pass 107 bytes
    mgr = DeviceManager(root)
    assert mgr.server.healthy() is None
    try:
        with pytest.raises(RuntimeError):
            await mgr.start()
        problem = mgr.server.healthy()
        assert problem is not None
        assert problem.startswith("device registration error: device plugin registration gRPC")
    finally:
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)
