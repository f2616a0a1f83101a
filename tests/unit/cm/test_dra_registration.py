"""DRA drivers registering through the plugin watcher: the services they
name are checked as upstream's registration handler does, the newest
endpoint is used, and a driver gone for the grace period has its
ResourceSlices on this node deleted (a quick return cancels that)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import pytest

from kubelet.cm.dra.claims import ClaimError
from kubelet.cm.dra.manager import DRAManager
from kubelet.cm.dra.plugin import DRAPluginManager, choose_service
from kubelet.pluginmanager import DRA_PLUGIN, PluginError
from kubelet.pluginmanager.manager import PluginManager
from kubelet.testing.draplugin import FakeDRAPlugin
from kubelet.testing.wait import wait_for_async
from tests.unit.cm.dra_fixtures import FakeAPI, new_manager

GPU = "gpu.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="


@pytest.fixture
async def setup() -> AsyncIterator[tuple[str, FakeAPI, DRAManager, PluginManager]]:
    root = tempfile.mkdtemp(prefix="drar", dir="/tmp")
    api = FakeAPI()
    m = new_manager(root, api)
    pm = PluginManager(os.path.join(root, "reg"))
    pm.add_handler(DRA_PLUGIN, m.plugins)
    os.makedirs(os.path.join(root, "reg"))
    stop = asyncio.Event()
    task = asyncio.ensure_future(pm.run(stop))
    yield root, api, m, pm
    stop.set()
    await task
    await m.plugins.close()
    shutil.rmtree(root, ignore_errors=True)


def test_services_are_chosen_as_upstream() -> None:
    assert choose_service(GPU, "/e", ["v2.DRAPlugin", "v1beta1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    assert choose_service(GPU, "/e", ["v1.DRAPlugin", "v1beta1.DRAPlugin"]) == "v1.DRAPlugin"
    with pytest.raises(PluginError, match="empty list of supported gRPC services"):
        choose_service(GPU, "/e", [])
    with pytest.raises(PluginError, match="none of services supported by the plugin"):
        choose_service(GPU, "/e", ["1.0.0"])


def test_names_and_endpoints_that_cannot_be_used_are_refused() -> None:
    h = DRAPluginManager(None, "n1")
    with pytest.raises(PluginError, match="not a DNS subdomain"):
        h.validate_plugin("../../etc", "/e.sock", ["v1.DRAPlugin"])
    with pytest.raises(PluginError, match="not an absolute path"):
        h.validate_plugin(GPU, "e.sock", ["v1.DRAPlugin"])


async def test_a_driver_registers_and_its_slices_go_when_it_stays_away(setup) -> None:
    root, api, m, _ = setup
    d = await FakeDRAPlugin(GPU, {}).start(os.path.join(root, "reg"), os.path.join(root, "g.sock"))
    assert d.registration is not None
    reg = d.registration
    await wait_for_async("registered", lambda: reg.statuses, 20, every=0.02, retry_on=())
    assert reg.statuses == [(True, "")]
    assert m.plugins.get(GPU).endpoint == os.path.join(root, "g.sock")
    os.unlink(d.reg_socket)
    await d.stop()
    want = SLICES + f"spec.nodeName=n1,spec.driver={GPU}"
    await wait_for_async("slices deleted", lambda: want in api.deletes, 20, every=0.02, retry_on=())
    with pytest.raises(ClaimError, match=r"DRA driver gpu\.example\.com is not registered"):
        m.plugins.get(GPU)


async def test_a_driver_back_within_the_grace_period_keeps_its_slices(setup) -> None:
    root, api, m, _ = setup
    m.plugins.wipe_delay = 0.5
    endpoint = os.path.join(root, "g.sock")
    d = await FakeDRAPlugin(GPU, {}).start(os.path.join(root, "reg"), endpoint)
    await m.plugins.deregister_plugin(GPU, "/nowhere")  # an unknown endpoint: nothing changes
    assert GPU not in m.plugins._wipes
    await wait_for_async("connected", lambda: m.plugins.usable(GPU), 20, every=0.02, retry_on=())
    assert GPU not in m.plugins._wipes
    await m.plugins.deregister_plugin(GPU, endpoint)
    assert GPU in m.plugins._wipes
    await m.plugins.register_plugin(GPU, endpoint, ["v1.DRAPlugin"], None)
    await wait_for_async("connected", lambda: m.plugins.usable(GPU), 20, every=0.02, retry_on=())
    assert GPU not in m.plugins._wipes
    await asyncio.sleep(0.7)
    assert api.deletes == []
    await d.stop()


async def test_an_unsupported_driver_is_told_why(setup) -> None:
    root, _, m, _ = setup
    d = await FakeDRAPlugin(GPU, {}, services=("v0.DRAPlugin",)).start(
        os.path.join(root, "reg"), os.path.join(root, "g.sock")
    )
    assert d.registration is not None
    reg = d.registration
    await wait_for_async("refused", lambda: reg.statuses, 20, every=0.02, retry_on=())
    ok, msg = reg.statuses[0]
    assert not ok and "none of services supported by the plugin" in msg
    assert GPU not in m.plugins.store
    await d.stop()


async def test_the_startup_wipe_deletes_every_slice_of_this_node() -> None:
    api = FakeAPI()
    h = DRAPluginManager(api.client(), "n1")
    assert await h.wipe_slices()
    assert api.deletes == [SLICES + "spec.nodeName=n1"]
    assert not await DRAPluginManager(None, "n1").wipe_slices()  # standalone: no API server
