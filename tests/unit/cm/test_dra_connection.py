"""A registered DRA driver's gRPC connection is watched, as upstream's plugin
manager does: a driver whose service stops (or never answers) while its
registration stays has its ResourceSlices on this node deleted after the
grace period, once per outage; a connection that comes back in time cancels
that; calls go to the newest connected endpoint and reach a restarted
service. Real gRPC servers on Unix sockets throughout."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import grpc
import pytest

from kubelet.cm.dra.api import api_pb2 as pb
from kubelet.cm.dra.manager import DRAManager
from kubelet.cm.dra.plugin import DRAPluginManager
from kubelet.testing.wait import wait_for_async
from tests.unit.cm.dra_fixtures import FakeAPI, add_driver, new_manager

GPU = "gpu.example.com"
WIPE = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + (
    f"spec.nodeName=n1,spec.driver={GPU}"
)
CLAIM = pb.Claim(namespace="default", uid="uid-c1", name="c1")


@pytest.fixture
async def setup() -> AsyncIterator[tuple[str, FakeAPI, DRAManager]]:
    root = tempfile.mkdtemp(prefix="drac", dir="/tmp")
    api = FakeAPI()
    m = new_manager(root, api)
    yield root, api, m
    await m.plugins.close()
    shutil.rmtree(root, ignore_errors=True)


async def connected(m: DRAManager, want: bool = True) -> None:
    await wait_for_async(
        f"connected={want}",
        lambda: m.plugins.usable(GPU) == want,
        20,
        every=0.02,
        retry_on=(),
    )


async def test_a_driver_whose_service_stops_loses_its_slices_while_registered(setup) -> None:
    root, api, m = setup
    d = await add_driver(m, root, GPU, {})
    await m.plugins.get(GPU).prepare([CLAIM])  # served
    await asyncio.sleep(0.2)  # well past the wipe delay: connected, nothing wiped
    assert api.deletes == []
    await d.stop_service()
    await wait_for_async("slices deleted", lambda: WIPE in api.deletes, 20, every=0.02, retry_on=())
    assert m.plugins.get(GPU).endpoint == d.endpoint  # still registered
    await d.stop()


async def test_a_driver_that_never_answers_loses_its_slices(setup) -> None:
    root, api, m = setup
    await m.plugins.register_plugin(GPU, os.path.join(root, "none.sock"), ["v1.DRAPlugin"], None)
    await wait_for_async("slices deleted", lambda: WIPE in api.deletes, 20, every=0.02, retry_on=())
    assert not m.plugins.usable(GPU)
    assert m.plugins.get(GPU).endpoint == os.path.join(root, "none.sock")


async def test_a_service_back_in_time_keeps_its_slices_and_gets_the_calls(setup) -> None:
    root, api, m = setup
    m.plugins.wipe_delay = 30.0
    d = await add_driver(m, root, GPU, {"c1": [(["gpu"], ["vendor.com/gpu=0"])]})
    await connected(m)
    assert GPU not in m.plugins._wipes
    await d.stop_service()
    await connected(m, False)
    pending = m.plugins._wipes[GPU]
    assert not pending.done()
    await d.start_service()  # the driver restarted: found again without a call
    await connected(m)
    await asyncio.sleep(0)
    assert pending.cancelled() and GPU not in m.plugins._wipes
    resp = await m.plugins.get(GPU).prepare([CLAIM])  # reaches the new server
    assert list(resp.claims["uid-c1"].devices[0].cdi_device_ids) == ["vendor.com/gpu=0"]
    assert d.prepared == [["c1"]]
    assert api.deletes == []
    await d.stop()


async def test_a_pending_wipe_keeps_its_clock_and_a_later_change_wipes_again(setup) -> None:
    root, api, m = setup
    m.plugins.wipe_delay = 0.3
    d = await add_driver(m, root, GPU, {})
    await m.plugins.get(GPU).prepare([CLAIM])  # served
    await d.stop_service()
    await wait_for_async(
        "wipe pending", lambda: GPU in m.plugins._wipes, 20, every=0.01, retry_on=()
    )
    pending = m.plugins._wipes[GPU]
    # Another endpoint that never answers: the pending wipe is not restarted.
    await m.plugins.register_plugin(GPU, os.path.join(root, "a.sock"), ["v1.DRAPlugin"], None)
    assert m.plugins._wipes[GPU] is pending
    await wait_for_async("wiped", lambda: WIPE in api.deletes, 20, every=0.02, retry_on=())
    await asyncio.sleep(0)
    assert GPU not in m.plugins._wipes
    # After the wipe, the next change that leaves it unusable starts another
    # (a driver that re-registered but never answers publishes nothing served).
    await m.plugins.register_plugin(GPU, os.path.join(root, "b.sock"), ["v1.DRAPlugin"], None)
    await wait_for_async("wiped again", lambda: len(api.deletes) == 2, 20, every=0.02, retry_on=())
    await d.stop()


async def test_the_newest_connected_endpoint_is_called(setup) -> None:
    root, _, m = setup
    d = await add_driver(m, root, GPU, {})
    dead = os.path.join(root, "dead.sock")
    await m.plugins.register_plugin(GPU, dead, ["v1.DRAPlugin"], None)
    first = m.plugins.store[GPU][0]
    await wait_for_async(
        "first endpoint ready",
        lambda: first.channel.get_state(True) is grpc.ChannelConnectivity.READY,
        20,
        every=0.02,
        retry_on=(),
    )
    await asyncio.sleep(0.1)
    assert m.plugins.get(GPU).endpoint == d.endpoint  # not the newer, unconnected one
    await d.stop_service()
    await connected(m, False)
    assert m.plugins.get(GPU).endpoint == dead  # none connected: the newest
    await d.stop()


async def test_a_deregistered_endpoint_is_no_longer_watched(setup) -> None:
    root, _, m = setup
    m.plugins.wipe_delay = 30.0
    d = await add_driver(m, root, GPU, {})
    await connected(m)
    await m.plugins.deregister_plugin(GPU, d.endpoint)
    assert m.plugins._watchers == {}
    assert not m.plugins._wipes[GPU].done()  # the last registration went: the clock runs
    await m.plugins.register_plugin(GPU, d.endpoint, ["v1.DRAPlugin"], None)
    await connected(m)
    assert GPU not in m.plugins._wipes
    await d.stop()


async def test_standalone_no_wipe_is_scheduled() -> None:
    h = DRAPluginManager(None, "n1", wipe_delay=0.05)
    await h.register_plugin(GPU, "/nonexistent/x.sock", ["v1.DRAPlugin"], None)
    await asyncio.sleep(0.2)
    assert h._wipes == {}
    await h.close()
