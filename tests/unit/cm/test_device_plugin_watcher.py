"""Device plugins registering through the plugin watcher (plugins_registry,
type DevicePlugin): the same checks and connection as Register on
kubelet.sock, the plugin told the outcome, deregistered when its socket goes."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

from kubelet.cm.devicemanager import HEALTHY
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.devicemanager.server import WatcherHandler
from kubelet.pluginmanager import DEVICE_PLUGIN
from kubelet.pluginmanager.manager import PluginManager, registry_dir
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.wait import wait_for_async
from tests.unit.cm.fixtures import R, counts
from tests.unit.pluginmanager.fixtures import FakePlugin


async def test_a_device_plugin_registers_through_the_plugin_watcher() -> None:
    root = tempfile.mkdtemp(prefix="dw", dir="/tmp")
    mgr = DeviceManager(root)
    await mgr.start()
    reg = registry_dir(root)
    os.makedirs(reg)
    pm = PluginManager(reg)
    pm.add_handler(DEVICE_PLUGIN, WatcherHandler(mgr.server))
    stop = asyncio.Event()
    task = asyncio.ensure_future(pm.run(stop))
    plugin = FakeDevicePlugin({"0": HEALTHY, "1": HEALTHY})
    await plugin.serve(root, "dp.sock")
    good = bad = None
    try:
        good = await FakePlugin(
            DEVICE_PLUGIN, R, endpoint=os.path.join(root, "dp.sock"), versions=("v1beta1",)
        ).start(os.path.join(reg, "good.sock"))
        await wait_for_async(
            "counts(mgr) == (2, 2)", lambda: counts(mgr) == (2, 2), 20, every=0.01, retry_on=()
        )
        await wait_for_async(
            'good.statuses == [(True, "")]',
            lambda: good.statuses == [(True, "")],
            20,
            every=0.01,
            retry_on=(),
        )
        bad = await FakePlugin(DEVICE_PLUGIN, "gpu", versions=("v1beta1",)).start(
            os.path.join(reg, "bad.sock")
        )
        await wait_for_async(
            "bool(bad.statuses)", lambda: bool(bad.statuses), 20, every=0.01, retry_on=()
        )
        assert bad.statuses[0][0] is False
        assert 'the ResourceName "gpu" is invalid' in bad.statuses[0][1]
        await good.stop()  # its registration socket goes: deregistered
        await wait_for_async(
            "counts(mgr) == (2, 0)", lambda: counts(mgr) == (2, 0), 20, every=0.01, retry_on=()
        )
    finally:
        stop.set()
        await task
        for p in (good, bad):
            if p is not None:
                await p.stop()
        await plugin.stop()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)
