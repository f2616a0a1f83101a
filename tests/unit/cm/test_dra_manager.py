"""The DRA manager against real drivers over gRPC: one NodePrepareResources
per driver per pod sync with all of its claims, the claim cache shared by
pods (prepared once, unprepared when the last pod goes), the CDI devices of
each container's claims and requests, refusals with upstream's messages, the
checkpoint written after each step and read back by a new manager."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import pytest

from kubelet import kubelet_subsystems
from kubelet.cm.dra.manager import DRAError, DRAManager
from kubelet.cm.dra.state import CHECKPOINT_NAME
from kubelet.metrics import REGISTRY
from kubelet.pod_workers import PodWorkerStates
from kubelet.testing.draplugin import FakeDRAPlugin
from tests.unit.cm.dra_fixtures import FakeAPI, add_driver, claim, new_manager, pod
from tests.unit.cm.fixtures import Pods

GPU, NIC = "gpu.example.com", "nic.example.com"
OPS, GRPC = "dra_operations_duration_seconds_count", "dra_grpc_operations_duration_seconds_count"
IN_USE = "dra_resource_claims_in_use"
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
_LABELS = {
    OPS: ("operation_name", "is_error"),
    GRPC: ("driver_name", "method_name", "grpc_status_code"),
    IN_USE: ("driver_name",),
}


def sample(name: str, *values: str) -> float | None:
    value = REGISTRY.get_sample_value(name, dict(zip(_LABELS[name], values, strict=True)))
    return value if value is not None or name == IN_USE else 0.0


@pytest.fixture
async def root() -> AsyncIterator[str]:
    d = tempfile.mkdtemp(prefix="dra", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def stored(root: str) -> list[dict[str, object]]:
    with open(os.path.join(root, CHECKPOINT_NAME)) as f:
        items = json.loads(json.load(f)["Data"])["ClaimInfoStateList"]
    return list(items or [])


async def stop(m: DRAManager, *plugins: FakeDRAPlugin) -> None:
    for p in plugins:
        await p.stop()
    await m.plugins.close()


async def test_one_prepare_call_per_driver_with_all_its_claims(root: str) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r1")], ["p1"])
    api.claims["b"] = claim("b", [(GPU, "r1"), (NIC, "n")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(
        m,
        root,
        GPU,
        {"a": [([], ["gpu.example.com/gpu=0"])], "b": [(["r1"], ["gpu.example.com/gpu=1"])]},
    )
    nic = await add_driver(m, root, NIC, {"b": [(["n"], ["nic.example.com/nic=eth1"])]})
    try:
        p = pod("p1", {"ca": "a", "cb": "b"}, {"c": [("ca", ""), ("cb", "r1")], "d": [("cb", "")]})
        await m.prepare_resources(p)
        assert gpu.prepared == [["a", "b"]] and nic.prepared == [["b"]]
        c, d = p["spec"]["containers"]
        assert m.container_cdi_devices(p, c) == ["gpu.example.com/gpu=0", "gpu.example.com/gpu=1"]
        # No request named: every device of the claim, drivers in name order.
        assert m.container_cdi_devices(p, d) == [
            "gpu.example.com/gpu=1",
            "nic.example.com/nic=eth1",
        ]
        # A second sync prepares nothing again.
        await m.prepare_resources(p)
        assert gpu.prepared == [["a", "b"]]
        # The pod resources API's view: each claim once, every device of it.
        [ca, cb] = m.dynamic_resources(p, c)
        assert (ca.name, [x.cdi_ids for x in ca.devices]) == ("a", [("gpu.example.com/gpu=0",)])
        assert [(x.driver, x.cdi_ids) for x in cb.devices] == [
            (GPU, ("gpu.example.com/gpu=1",)),
            (NIC, ("nic.example.com/nic=eth1",)),
        ]
        names = [(e["ClaimName"], sorted(e["DriverState"])) for e in stored(root)]
        assert names == [("a", [GPU]), ("b", [GPU, NIC])]
    finally:
        await stop(m, gpu, nic)


async def test_a_shared_claim_is_prepared_once_and_unprepared_after_the_last_pod(
    root: str,
) -> None:
    api = FakeAPI()
    api.claims["s"] = claim("s", [(GPU, "r")], ["p1", "p2"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"s": [(["r"], ["gpu.example.com/gpu=0"])]})
    try:
        p1 = pod("p1", {"x": "s"}, {"c": [("x", "")]})
        p2 = pod("p2", {"y": "s"}, {"c": [("y", "r")]})
        ops, calls = sample(OPS, "PrepareResources", "false"), sample(GRPC, GPU, PREPARE, "OK")
        await m.prepare_resources(p1)
        await m.prepare_resources(p2)
        assert gpu.prepared == [["s"]]
        assert sample(OPS, "PrepareResources", "false") == ops + 2
        assert sample(GRPC, GPU, PREPARE, "OK") == calls + 1
        assert sample(IN_USE, GPU) == sample(IN_USE, "<any>") == 1
        assert stored(root)[0]["PodUIDs"] == {"p1": {}, "p2": {}}
        assert m.container_cdi_devices(p2, p2["spec"]["containers"][0]) == ["gpu.example.com/gpu=0"]
        await m.unprepare_resources(p1)
        assert gpu.unprepared == [] and m.claims.holds_pod("p2")
        assert not m.claims.holds_pod("p1")
        await m.unprepare_resources(p2)
        assert gpu.unprepared == [["s"]]
        assert sample(IN_USE, GPU) is None and sample(IN_USE, "<any>") == 0
        assert stored(root) == [] and not m.claims.holds_pod("p2")
    finally:
        await stop(m, gpu)


async def test_the_checkpoint_is_read_back_and_the_claim_prepared_again(root: str) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"a": [(["r"], ["gpu.example.com/gpu=0"])]})
    p = pod("p1", {"x": "a"}, {"c": [("x", "r")]})
    try:
        await m.prepare_resources(p)
    finally:
        await stop(m, gpu)
    again = new_manager(root, api, Pods())
    assert again.claims.holds_pod("p1")
    # The devices are known at once (a container restarted before the next sync).
    assert again.container_cdi_devices(p, p["spec"]["containers"][0]) == ["gpu.example.com/gpu=0"]
    gpu2 = await add_driver(again, root, GPU, {"a": [(["r"], ["gpu.example.com/gpu=9"])]})
    try:
        await again.prepare_resources(p)  # restored entries are not marked prepared
        assert gpu2.prepared == [["a"]]
        assert again.container_cdi_devices(p, p["spec"]["containers"][0]) == [
            "gpu.example.com/gpu=9"
        ]
        # The pod is gone while the kubelet was down: the reconcile loop unprepares.
        await again.reconcile()
        assert gpu2.unprepared == [["a"]] and stored(root) == []
    finally:
        await stop(again, gpu2)


async def test_refusals_carry_upstreams_messages_and_call_no_driver(root: str) -> None:
    api = FakeAPI()
    api.claims["mine"] = claim("mine", [(GPU, "r")], ["other"])
    api.claims["free"] = claim("free", [(NIC, "r")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {})
    try:
        with pytest.raises(DRAError, match=r"prepare dynamic resources: pod p1 \(p1\) is not "
                           r"allowed to use ResourceClaim mine \(uid-mine\)"):  # fmt: skip
            await m.prepare_resources(pod("p1", {"x": "mine"}, {}))
        with pytest.raises(DRAError, match=r"DRA driver nic\.example\.com is not registered"):
            await m.prepare_resources(pod("p1", {"x": "free"}, {}))
        with pytest.raises(DRAError, match="fetch ResourceClaim gone: 404"):
            await m.prepare_resources(pod("p1", {"x": "gone"}, {}))
        waiting = pod("p1", {}, {})
        waiting["spec"]["resourceClaims"] = [{"name": "t", "resourceClaimTemplateName": "tpl"}]
        with pytest.raises(DRAError, match='pod "default/p1": ResourceClaim not created yet'):
            await m.prepare_resources(waiting)
        # A claim made from the template must be owned by the pod.
        waiting["status"] = {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "made"}]}
        api.claims["made"] = claim("made", [(GPU, "r")], ["p1"], owner="someone-else")
        with pytest.raises(DRAError, match="was not created for pod default/p1"):
            await m.prepare_resources(waiting)
        api.claims["made"] = claim("made", [(GPU, "r")], ["p1"], owner="p1")
        await m.prepare_resources(waiting)
        assert gpu.prepared == [["made"]]
        # A pod entry whose claim is not needed (null name in the status) is skipped.
        skip = pod("p2", {}, {})
        skip["spec"]["resourceClaims"] = [{"name": "t", "resourceClaimTemplateName": "tpl"}]
        skip["status"] = {"resourceClaimStatuses": [{"name": "t"}]}
        await m.prepare_resources(skip)
        assert gpu.prepared == [["made"]]
    finally:
        await stop(m, gpu)


async def test_a_driver_error_fails_the_prepare_and_it_is_retried(root: str) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r")], ["p1"])
    failing = {"on": True}
    m = new_manager(root, api)
    gpu = await add_driver(
        m, root, GPU, {"a": [(["r"], ["gpu.example.com/gpu=0"])]},
        fail=lambda method, name: "no GPU today" if failing["on"] else None,
    )  # fmt: skip
    p = pod("p1", {"x": "a"}, {"c": [("x", "")]})
    try:
        with pytest.raises(DRAError, match="NodePrepareResources failed for ResourceClaim a: "
                           "no GPU today"):  # fmt: skip
            await m.prepare_resources(p)
        # The pod counts on the claim (its termination unprepares it) but has no devices.
        assert m.claims.holds_pod("p1")
        assert m.container_cdi_devices(p, p["spec"]["containers"][0]) == []
        failing["on"] = False
        await m.prepare_resources(p)
        assert gpu.prepared == [["a"], ["a"]]
        assert m.container_cdi_devices(p, p["spec"]["containers"][0]) == ["gpu.example.com/gpu=0"]
    finally:
        await stop(m, gpu)


async def test_a_v1beta1_only_driver_is_called_on_its_service(root: str) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"a": [([], ["gpu.example.com/gpu=0"])]},
                           services=("v1beta1.DRAPlugin",), package="v1beta1")  # fmt: skip
    try:
        await m.prepare_resources(pod("p1", {"x": "a"}, {}))
        assert gpu.prepared == [["a"]]
    finally:
        await stop(m, gpu)


async def test_a_claim_recreated_under_the_same_name_is_refused(root: str) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "")], ["p1", "p2"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"a": [([], ["gpu.example.com/gpu=0"])]})
    try:
        await m.prepare_resources(pod("p1", {"x": "a"}, {}))
        api.claims["a"]["metadata"]["uid"] = "new-uid"
        with pytest.raises(DRAError, match="old ResourceClaim with same name a and different UID"):
            await m.prepare_resources(pod("p2", {"x": "a"}, {}))
    finally:
        await stop(m, gpu)


async def test_pods_without_claims_and_repeat_syncs_leave_the_checkpoint_alone(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r1")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"a": [([], ["gpu.example.com/gpu=0"])]})
    writes: list[str] = []
    real = m.claims.store.write
    monkeypatch.setattr(
        m.claims.store, "write", lambda key, data: (writes.append(key), real(key, data))
    )
    try:
        plain = pod("p0", {}, {"c": []})
        await m.prepare_resources(plain)
        await m.unprepare_resources(plain)
        assert writes == []  # a write per pod was most of start-up's I/O at 1,000 pods
        p = pod("p1", {"ca": "a"}, {"c": [("ca", "")]})
        await m.prepare_resources(p)
        assert len(writes) == 2  # the pod counted on its claim, then the claim prepared
        await m.prepare_resources(p)  # prepared already
        assert len(writes) == 2
        await m.unprepare_resources(p)
        assert len(writes) == 3 and stored(root) == []
    finally:
        await stop(m, gpu)


async def test_a_pod_with_prepared_claims_could_still_run(root: str) -> None:
    """Upstream's PodCouldHaveRunningContainers: a pod whose containers have
    stopped but whose claims are prepared is not yet done, so the status
    manager holds its terminal phase (its devices are not handed on)."""
    api = FakeAPI()
    api.claims["a"] = claim("a", [(GPU, "r")], ["p1"])
    m = new_manager(root, api)
    gpu = await add_driver(m, root, GPU, {"a": [(["r"], ["gpu.example.com/gpu=0"])]})
    workers = PodWorkerStates()  # no worker knows p1: its containers cannot run
    could_run = kubelet_subsystems._could_run(workers, m.claims)
    try:
        p1 = pod("p1", {"x": "a"}, {"c": [("x", "")]})
        assert not could_run("p1")
        await m.prepare_resources(p1)
        assert could_run("p1") and not workers.could_have_running_containers("p1")
        await m.unprepare_resources(p1)
        assert not could_run("p1")
    finally:
        await stop(m, gpu)
    assert kubelet_subsystems._could_run(workers, None) == workers.could_have_running_containers
