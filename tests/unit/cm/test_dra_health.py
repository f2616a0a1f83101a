"""DRA device health (ResourceHealthStatus, KEP-4680) against a real driver
over gRPC on a Unix socket: its NodeWatchResources stream fills the health
cache, only the pods whose claims hold a changed device are synced, the
containers' allocatedResourcesStatus entries have upstream's shape, a stream
that ends clears the driver's health and is opened again, a driver without
the service is asked once, and the dra_health_state checkpoint reads back."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.dra import healthinfo as hi
from kubelet.cm.dra.api import health_pb2 as hpb
from kubelet.cm.dra.claiminfo import ClaimInfoCache
from kubelet.cm.dra.health import DRAHealth, merge_statuses
from kubelet.cm.dra.manager import DRAManager
from kubelet.cm.dra.plugin import DRAPluginManager, HealthStreamHandler
from kubelet.cm.resource_managers import (
    DRASetup,
    ResourceManagerConfig,
    ResourceManagers,
    new_resource_managers,
)
from kubelet.container.runtime import PodStatus
from kubelet.features import FeatureGate
from kubelet.status.generate import generate
from kubelet.testing.draplugin import FakeDRAPlugin
from kubelet.testing.wait import wait_for_async
from kubelet.util import cpuset
from tests.unit.cm.dra_fixtures import FakeAPI, add_driver, claim, new_manager, pod
from tests.unit.cm.fixtures import Pods, machine

GPU = "gpu.example.com"


class Clock:
    def __init__(self, t: float = 1_750_000_000.25) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Setup:
    root: str
    api: FakeAPI
    m: DRAManager
    health: DRAHealth
    told: list[str]
    drivers: list[FakeDRAPlugin]


@pytest.fixture
async def s() -> AsyncIterator[Setup]:
    root = tempfile.mkdtemp(prefix="drah", dir="/tmp")
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r1")], ["p1"])
    api.claims["b"] = claim("b", [(GPU, "r1")], ["p2", "p3"])
    told: list[str] = []
    claims = ClaimInfoCache(root)
    health = DRAHealth(hi.HealthCache(root), claims, told.append)
    m = new_manager(root, api, claims=claims, health=health)
    drivers: list[FakeDRAPlugin] = []
    yield Setup(root, api, m, health, told, drivers)
    for d in drivers:
        await d.stop()
    await m.plugins.close()
    shutil.rmtree(root, ignore_errors=True)


async def until(what: str, cond: Any) -> None:
    await wait_for_async(what, cond, 10, every=0.01, retry_on=())


async def with_pods(s: Setup, **kw: Any) -> tuple[FakeDRAPlugin, list[dict[str, Any]]]:
    """A GPU driver serving health; p1 holds claim a (a CDI ID), p2 and p3 share
    claim b (no CDI ID), all prepared."""
    d = await add_driver(s.m, s.root, GPU, {"a": [([], ["gpu.example.com/gpu=0"])], "b": [([], [])]},
                         health=True, **kw)  # fmt: skip
    s.drivers.append(d)
    pods = [
        pod("p1", {"gpu": "a"}, {"c": [("gpu", "r1")], "plain": []}),
        pod("p2", {"shared": "b"}, {"c": [("shared", "")]}),
        pod("p3", {"shared": "b"}, {"c": [("shared", "")]}),
    ]
    for p in pods:
        await s.m.prepare_resources(p)
    await until("a health stream", lambda: d.health_streams)
    return d, pods


async def test_a_response_updates_the_cache_and_syncs_only_the_pods_holding_it(s: Setup) -> None:
    d, _ = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.UNHEALTHY)])
    await until("p1 told", lambda: s.told == ["p1"])
    assert s.health.cache.health(GPU, "pool", "a-0") == hi.UNHEALTHY
    assert s.health.cache.health(GPU, "pool", "b-0") == hi.UNKNOWN
    # The same health again changes nothing: nobody is told.
    d.send_health([("pool", "a-0", hpb.UNHEALTHY), ("pool", "b-0", hpb.HEALTHY)])
    await until("p2 and p3 told", lambda: s.told == ["p1", "p2", "p3"])
    d.send_health([("pool", "a-0", hpb.UNHEALTHY), ("pool", "b-0", hpb.HEALTHY)])
    d.send_health([("pool", "other", hpb.UNHEALTHY)])  # held by no pod
    await until("cached", lambda: s.health.cache.health(GPU, "pool", "other") == hi.UNHEALTHY)
    assert s.told == ["p1", "p2", "p3"]


async def test_container_entries_have_upstreams_shape(s: Setup) -> None:
    d, (p1, p2, _) = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.UNHEALTHY), ("pool", "b-0", hpb.HEALTHY)])
    await until("p2 told", lambda: "p2" in s.told)
    c, plain = p1["spec"]["containers"]
    assert s.health.container_status(p1, c) == [
        {"name": "claim:gpu/r1",
         "resources": [{"resourceID": "gpu.example.com/gpu=0", "health": "Unhealthy"}]},
    ]  # fmt: skip
    assert s.health.container_status(p1, plain) == []
    # No CDI device ID: <driver>/<pool>/<device>; no request: claim:<name>.
    assert s.health.container_status(p2, p2["spec"]["containers"][0]) == [
        {"name": "claim:shared",
         "resources": [{"resourceID": "gpu.example.com/pool/b-0", "health": "Healthy"}]},
    ]  # fmt: skip


async def test_the_status_merges_device_plugin_and_claim_entries(s: Setup) -> None:
    d, (p1, _, _) = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.HEALTHY)])
    await until("p1 told", lambda: s.told == ["p1"])
    dp = [{"name": "example.com/fpga", "resources": [{"resourceID": "f0", "health": "Healthy"}]}]

    class Devices:
        def allocated_resources_status(self, pod_uid: str, name: str) -> list[Any]:
            return dp if (pod_uid, name) == ("p1", "c") else []

    rm = ResourceManagers(*cast(Any, (None, None, None, Devices())), dra=s.m, dra_health=s.health)
    assert rm.allocated_resources_status(p1, "c") == [
        *dp,
        {"name": "claim:gpu/r1",
         "resources": [{"resourceID": "gpu.example.com/gpu=0", "health": "Healthy"}]},
    ]  # fmt: skip
    assert rm.allocated_resources_status(p1, "plain") == []
    assert rm.allocated_resources_status(p1, "nope") == []


def test_merge_replaces_by_name_and_drops_empty_entries() -> None:
    a: list[Any] = [{"name": "x", "resources": [{"resourceID": "1", "health": "Healthy"}]},
                    {"name": "claim:c", "resources": []}]  # fmt: skip
    b: list[Any] = [{"name": "claim:c", "resources": [{"resourceID": "2", "health": "Unknown"}]}]
    assert merge_statuses(a, b) == [a[0], b[0]]
    assert merge_statuses(a, []) == [a[0]]


async def test_a_stream_end_clears_the_driver_and_it_is_opened_again(s: Setup) -> None:
    d, _ = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.UNHEALTHY)])
    await until("p1 told", lambda: s.told == ["p1"])
    d.end_health()  # the driver ends the stream cleanly
    await until("cleared", lambda: s.health.cache.devices(GPU) == [])
    # The pods that saw a health are told it is gone.
    assert s.told == ["p1", "p1"]
    assert s.health.cache.health(GPU, "pool", "a-0") == hi.UNKNOWN
    # Still registered: the stream is opened again and serves.
    await until("a second stream", lambda: d.health_calls == 2 and d.health_streams)
    d.send_health([("pool", "a-0", hpb.HEALTHY)])
    await until("healthy", lambda: s.health.cache.health(GPU, "pool", "a-0") == hi.HEALTHY)
    # An error ends it too (and clears), and it comes back again.
    d.end_health(grpc.StatusCode.INTERNAL)
    await until("a third stream", lambda: d.health_calls == 3 and d.health_streams)
    assert s.health.cache.devices(GPU) == []


async def test_a_driver_gone_is_cleared_and_retried_with_back_off(s: Setup) -> None:
    d, _ = await with_pods(s)
    d.send_health([("pool", "b-0", hpb.HEALTHY)])
    await until("p2 told", lambda: "p2" in s.told)
    plugin = s.m.plugins.get(GPU)
    opened = plugin.watch_resources
    attempts: list[float] = []

    def counted() -> Any:
        attempts.append(asyncio.get_running_loop().time())
        return opened()

    plugin.watch_resources = counted  # type: ignore[method-assign]
    await d.stop_service()  # the service goes, the registration stays
    await until("cleared", lambda: s.health.cache.devices(GPU) == [])
    calls = d.health_calls
    await asyncio.sleep(0.3)  # waits of 0.02, 0.04, 0.05, 0.05...: a handful of tries
    assert d.health_calls == calls  # nothing served meanwhile
    assert 2 <= len(attempts) <= 9, attempts
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(g >= 0.015 for g in gaps), gaps
    await d.start_service()
    await until("reopened", lambda: d.health_streams)
    d.send_health([("pool", "b-0", hpb.UNHEALTHY)])
    await until("unhealthy", lambda: s.health.cache.health(GPU, "pool", "b-0") == hi.UNHEALTHY)


async def test_deregistration_stops_the_stream_and_clears(s: Setup) -> None:
    d, _ = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.HEALTHY)])
    await until("p1 told", lambda: s.told == ["p1"])
    await s.m.plugins.deregister_plugin(GPU, d.endpoint)
    assert s.health.cache.devices(GPU) == []
    await until("stream closed", lambda: not d.health_streams)
    await asyncio.sleep(0.1)
    assert d.health_calls == 1
    await d.stop()


async def test_a_driver_without_the_service_is_asked_once(
    s: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubelet.cm.dra.plugin")
    d = await add_driver(s.m, s.root, GPU, {}, health=False)
    s.drivers.append(d)
    task = s.m.plugins._health[(GPU, d.endpoint)]
    await until("the health task ends", task.done)
    await asyncio.sleep(0.2)  # 10x the retry wait: a loop would have logged again
    said = [r for r in caplog.records if "does not serve NodeWatchResources" in r.message]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert task.exception() is None
    await d.stop()


async def test_without_the_gate_no_stream_is_opened(tmp_path: Any) -> None:
    root = str(tmp_path)
    m = new_manager(root, FakeAPI())
    try:
        d = await add_driver(m, root, GPU, {}, health=True)
        await asyncio.sleep(0.1)
        assert d.health_calls == 0 and m.plugins._health == {}
        await d.stop()
    finally:
        await m.plugins.close()


# ------------------------------------------------------------- the cache
def test_the_checkpoint_is_upstreams_json_and_reads_back(tmp_path: Any) -> None:
    clock = Clock()
    c = hi.HealthCache(str(tmp_path), clock)
    changed = c.update(GPU, [hi.DeviceHealth("pool", "d0", hi.UNHEALTHY, 5.0),
                             hi.DeviceHealth("pool", "d1", hi.HEALTHY)])  # fmt: skip
    assert [d.device_name for d in changed] == ["d0", "d1"]
    with open(os.path.join(tmp_path, "dra_health_state")) as f:
        raw = f.read()
    assert json.loads(raw) == {GPU: {"Devices": {
        "pool/d0": {"PoolName": "pool", "DeviceName": "d0", "Health": "Unhealthy",
                    "LastUpdated": "2025-06-15T15:06:40.25Z"},
        "pool/d1": {"PoolName": "pool", "DeviceName": "d1", "Health": "Healthy",
                    "LastUpdated": "2025-06-15T15:06:40.25Z"},
    }}}  # fmt: skip
    assert " " not in raw  # compact, as encoding/json writes it
    again = hi.HealthCache(str(tmp_path), clock)
    assert again.drivers == c.drivers
    assert again.health(GPU, "pool", "d0") == hi.UNHEALTHY
    c.clear_driver(GPU)
    assert hi.HealthCache(str(tmp_path), clock).drivers == {}


def test_a_file_the_go_kubelet_wrote_is_read(tmp_path: Any) -> None:
    with open(os.path.join(tmp_path, "dra_health_state"), "w") as f:
        f.write('{"d.example.com":{"Devices":{"p/x":{"PoolName":"p","DeviceName":"x",'
                '"Health":"Healthy","LastUpdated":"2025-06-15T17:06:40.5+02:00"}}}}')  # fmt: skip
    c = hi.HealthCache(str(tmp_path), Clock(1_750_000_000.5 + 10))
    assert c.drivers["d.example.com"]["p/x"].last_updated == 1_750_000_000.5
    assert c.health("d.example.com", "p", "x") == hi.HEALTHY


def test_a_corrupt_checkpoint_is_logged_and_an_empty_cache_used(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with open(os.path.join(tmp_path, "dra_health_state"), "w") as f:
        f.write('{"d": {"Devices": [1]}}')
    assert hi.HealthCache(str(tmp_path)).drivers == {}
    assert "Failed to load DRA health checkpoint" in caplog.text


def test_health_times_out_to_unknown(tmp_path: Any) -> None:
    clock = Clock()
    c = hi.HealthCache(str(tmp_path), clock)
    c.update(GPU, [hi.DeviceHealth("pool", "d0", hi.UNHEALTHY),
                   hi.DeviceHealth("pool", "d1", hi.HEALTHY)])  # fmt: skip
    clock.t += hi.HEALTH_TIMEOUT
    assert c.health(GPU, "pool", "d0") == hi.UNHEALTHY
    clock.t += 0.5
    assert c.health(GPU, "pool", "d0") == hi.UNKNOWN  # read: timed out
    # A report without d0: d0 turns Unknown (a change); d1 reported unchanged.
    changed = c.update(GPU, [hi.DeviceHealth("pool", "d1", hi.HEALTHY)])
    assert [(d.device_name, d.health) for d in changed] == [("d0", hi.UNKNOWN)]
    assert c.drivers[GPU]["pool/d0"].last_updated == clock.t
    assert c.health(GPU, "pool", "d1") == hi.HEALTHY
    # Unknown stays Unknown: no further change.
    clock.t += 100
    assert [d.device_name for d in c.update(GPU, [])] == ["d1"]
    assert c.update(GPU, []) == []


def test_the_kubelets_receive_time_is_kept_not_the_drivers(tmp_path: Any) -> None:
    clock = Clock()
    c = hi.HealthCache(str(tmp_path), clock)
    c.update(GPU, [hi.DeviceHealth("pool", "d0", "Bogus", last_updated=1.0)])
    d = c.drivers[GPU]["pool/d0"]
    assert (d.health, d.last_updated) == (hi.UNKNOWN, clock.t)


# ------------------------------------------------------- the composition
@pytest.mark.parametrize("on", [True, False])
async def test_the_gate_wires_the_streams_into_the_pod_status(on: bool, tmp_path: Any) -> None:
    root = str(tmp_path)
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r1")], ["p1"])
    told: list[str] = []

    def new_plugins(health: HealthStreamHandler | None) -> DRAPluginManager:
        return DRAPluginManager(api.client(), "n1", health_retry=(0.02, 0.05), health=health)

    rm = new_resource_managers(
        KubeletConfiguration(), ResourceManagerConfig(machine(), {}, root, cpuset.EMPTY),
        FeatureGate({"ResourceHealthStatus": on}), Pods(), lambda: True,
        dra=DRASetup(ClaimInfoCache(root), new_plugins), kube_client=api.client(),
        device_health_changed=told.append,
    )  # fmt: skip
    assert rm.dra is not None and (rm.dra_health is not None) == on
    d = await add_driver(rm.dra, root, GPU, {"a": [([], ["gpu.example.com/gpu=0"])]}, health=True)
    try:
        p1 = pod("p1", {"gpu": "a"}, {"c": [("gpu", "r1")]})
        await rm.dra.prepare_resources(p1)
        if not on:
            await asyncio.sleep(0.1)
            assert d.health_calls == 0 and rm.allocated_resources_status(p1, "c") == []
            return
        await until("a health stream", lambda: d.health_streams)
        d.send_health([("pool", "a-0", hpb.UNHEALTHY)])
        await until("p1 told", lambda: told == ["p1"])
        assert os.path.exists(os.path.join(root, "dra_health_state"))
        api_status = generate(p1, PodStatus("p1"), {}, [], None,
                              resource_health=rm.allocated_resources_status)  # fmt: skip
        [cs] = api_status["containerStatuses"]
        assert cs["allocatedResourcesStatus"] == [
            {"name": "claim:gpu/r1",
             "resources": [{"resourceID": "gpu.example.com/gpu=0", "health": "Unhealthy"}]},
        ]  # fmt: skip
    finally:
        await d.stop()
        await rm.dra.plugins.close()


async def test_a_stopping_kubelet_keeps_the_checkpoint(s: Setup) -> None:
    d, _ = await with_pods(s)
    d.send_health([("pool", "a-0", hpb.UNHEALTHY)])
    await until("p1 told", lambda: s.told == ["p1"])
    await s.m.plugins.close()
    assert s.told == ["p1"]  # nobody synced for the shutdown
    after = hi.HealthCache(s.root)
    assert after.health(GPU, "pool", "a-0") == hi.UNHEALTHY
