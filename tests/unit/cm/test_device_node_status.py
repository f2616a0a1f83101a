"""Device plugin resources in Node.status: capacity is all devices, allocatable
the healthy ones (nothing reserved off them), a removed resource reads 0, and
a plugin's change is written at once rather than at the next period."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.kubelet_node_status import NodeStatusManager
from kubelet.nodestatus.setters import DeviceResources, NodeInputs, allocatable, capacity
from kubelet.testing.deviceplugin import FakeDevicePlugin
from tests.unit.volume.fixtures import MACHINE, FakeAPI

R = "example.com/gpu"


def inputs(devices: DeviceResources | None = None, **kw: Any) -> NodeInputs:
    cfg = KubeletConfiguration()
    cfg.node_status_update_frequency = 3600.0  # only urgent writes in these tests
    cfg.kube_reserved = {R: "1"}  # never taken off a device plugin resource
    if devices is not None:
        kw["device_resources"] = lambda: devices
    return NodeInputs(name="n", config=cfg, machine=MACHINE, kubelet_version="v1.34.4", **kw)


def test_capacity_and_allocatable_of_device_resources() -> None:
    inp = inputs(({R: 4, "example.com/nic": 0}, {R: 3, "example.com/nic": 0}, ["old.io/dev"]))
    cap = capacity(inp)
    alloc = allocatable(inp, cap)
    assert (cap[R], alloc[R]) == ("4", "3")
    assert (cap["example.com/nic"], alloc["example.com/nic"]) == ("0", "0")
    assert (cap["old.io/dev"], alloc["old.io/dev"]) == ("0", "0")
    assert "example.com/gpu" not in capacity(inputs())


async def test_a_plugin_change_is_written_at_once() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    devices = DeviceManager(root)
    await devices.start()
    api = FakeAPI()
    inp = inputs(urgent=devices.capacity_changed, device_resources=devices.capacity)
    status = NodeStatusManager(api, inp)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(status.run(stop))
    plugin = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY})
    try:
        await status.registered.wait()

        async def written(cap: str, alloc: str) -> None:
            def seen() -> bool:
                return any(
                    p["capacity"].get(R) == cap and p["allocatable"].get(R) == alloc
                    for p in api.status_patches
                )

            while not seen():  # noqa: ASYNC110 (the patches a fake API got)
                await asyncio.sleep(0.01)

        await plugin.register(devices.socket_dir, "p.sock", R)
        # The period is an hour: each of these writes was urgent.
        await asyncio.wait_for(written("2", "2"), 20)
        plugin.update({"0": HEALTHY, "1": UNHEALTHY})
        await asyncio.wait_for(written("2", "1"), 20)
        await plugin.stop()
        await asyncio.wait_for(written("2", "0"), 20)
    finally:
        stop.set()
        await task
        await devices.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_extended_resources_an_admin_advertised_become_allocatable() -> None:
    from kubelet.nodestatus.setters import compute_status

    inp = inputs(({R: 2}, {R: 2}, []))
    old = {"capacity": {"example.com/dongle": "4", R: "9", "kubernetes.io/x": "1", "cpu": "64"}}
    status = compute_status(inp, old)
    # Someone else's extended resource stays and is allocatable (nothing reserved
    # off it); the device manager's own count and the machine's cpu win.
    assert status["capacity"]["example.com/dongle"] == status["allocatable"]["example.com/dongle"] == "4"  # fmt: skip
    assert status["capacity"][R] == "2" and status["capacity"]["cpu"] == "2"
    assert "kubernetes.io/x" not in status["capacity"]
    assert "example.com/dongle" not in compute_status(inp, None)["capacity"]
