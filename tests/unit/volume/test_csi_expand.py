"""Node expansion of CSI volumes (expand.py) against a fake API and driver
client: which size is asked for, which paths and capability the driver gets
for filesystem and raw block volumes, and what the claim's status says after
success and each kind of failure, as upstream's NodeExpander writes it."""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest

from kubelet.volume import VolumeError
from kubelet.volume.csi import paths, source
from kubelet.volume.csi.client import EXPAND_VOLUME, STAGE_UNSTAGE, CSIError
from kubelet.volume.csi.drivers import DriversStore
from kubelet.volume.csi.expand import Expander, Resize, node_resize
from tests.unit.volume.helpers import ObjectsAPI

PVC = "/api/v1/namespaces/ns/persistentvolumeclaims/c"
PV = "/api/v1/persistentvolumes/pv1"
FS_TARGET = "/root/pods/u/volumes/kubernetes.io~csi/pv1/mount"
BLOCK_TARGET = "/root/plugins/kubernetes.io/csi/volumeDevices/publish/pv1/u"


class ExpandingClient:
    def __init__(self, caps: frozenset[int], fail: VolumeError | None = None) -> None:
        self.caps, self.fail = caps, fail
        self.requests: list[Any] = []

    async def node_capabilities(self) -> frozenset[int]:
        return self.caps

    async def node_expand(self, req: Any) -> int:
        self.requests.append(req)
        if self.fail is not None:
            raise self.fail
        return int(req.capacity_range.required_bytes)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def event(self, ref: Any, etype: str, reason: str, message: str) -> None:
        self.seen.append((ref["kind"], etype, reason, message))


def _expander(api: ObjectsAPI, client: ExpandingClient, events: Events | None = None) -> Expander:
    store = DriversStore()
    store._drivers["d.example.com"] = type("D", (), {"client": client})()  # type: ignore[assignment]
    return Expander(api, store, "/root", events)  # type: ignore[arg-type]


def _objects(status: dict[str, Any], requested: str = "2Gi") -> dict[str, Any]:
    return {
        PVC: {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "1", "uid": "cu"},
              "spec": {"resources": {"requests": {"storage": requested}}}, "status": status},
        PV: {"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "2Gi"}}},
    }  # fmt: skip


def _pending(**extra: Any) -> dict[str, Any]:
    return {
        "capacity": {"storage": "1Gi"},
        "allocatedResources": {"storage": "2Gi"},
        "allocatedResourceStatuses": {"storage": "NodeResizePending"},
        **extra,
    }


VOL = source.CSIVolume(
    driver="d.example.com", handle="h", mode=paths.PERSISTENT, dir_name="pv1",
    access_modes=("ReadWriteOnce",), pv_name="pv1", claim=("ns", "c"),
)  # fmt: skip
BLOCK_VOL = dataclasses.replace(VOL, volume_mode=paths.BLOCK)
POD = {"metadata": {"uid": "u", "name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}}


def test_what_a_claim_asks_of_the_node():
    def plan(status: dict[str, Any]) -> Resize | None:
        o = _objects(status)
        return node_resize(o[PVC], o[PV])

    assert plan({"capacity": {"storage": "2Gi"}}) is None  # nothing to grow
    # An older resizer (no allocatedResources): the PV's size, no status to follow.
    assert plan({"capacity": {"storage": "1Gi"}}) == Resize("2Gi", False, "")
    # The allocated size is what is asked for, not the PV's.
    assert plan(_pending(allocatedResources={"storage": "1536Mi"})) == Resize(
        "1536Mi", True, "NodeResizePending"
    )
    assert plan(_pending(allocatedResourceStatuses={})) == Resize("2Gi", True, "")


async def test_filesystem_expansion_finishes_the_claims_resize():
    api = ObjectsAPI(_objects(_pending(conditions=[
        {"type": "FileSystemResizePending", "status": "True"},
        {"type": "ModifyingVolume", "status": "True"},
    ])))  # fmt: skip
    client, events = ExpandingClient(frozenset({EXPAND_VOLUME, STAGE_UNSTAGE})), Events()
    await _expander(api, client, events).expand(POD, VOL, FS_TARGET)
    req = client.requests[0]
    assert req.capacity_range.required_bytes == 2 * 1024**3
    assert req.volume_path == FS_TARGET
    assert req.staging_target_path == paths.device_mount_path("/root", "d.example.com", "h")
    assert req.volume_capability.HasField("mount")
    assert [p[1]["status"] for p in api.patches] == [
        {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}},
        {"capacity": {"storage": "2Gi"}, "allocatedResourceStatuses": {"storage": None},
         "conditions": [{"type": "ModifyingVolume", "status": "True"}]},
    ]  # fmt: skip
    status = api.objects[PVC]["status"]
    assert status["capacity"] == {"storage": "2Gi"} and status["allocatedResourceStatuses"] == {}
    msg = 'MountVolume.NodeExpandVolume succeeded for volume "pv1" n1'
    assert events.seen == [
        ("Pod", "Normal", "FileSystemResizeSuccessful", msg),
        ("PersistentVolumeClaim", "Normal", "FileSystemResizeSuccessful", msg),
    ]
    # Done: a later remount finds nothing to grow.
    await _expander(api, client).expand(POD, VOL, FS_TARGET)
    assert len(client.requests) == 1


async def test_block_volume_expanded_at_its_device_with_block_access():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME, STAGE_UNSTAGE}))
    await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    (req,) = client.requests
    # The publish file (the device) and the block staging path, as upstream
    # passes them for a block volume (its DevicePath and GetStagingPath).
    assert req.volume_path == BLOCK_TARGET
    assert req.staging_target_path == "/root/plugins/kubernetes.io/csi/volumeDevices/staging/pv1"
    assert req.volume_capability.HasField("block") and not req.volume_capability.HasField("mount")
    assert req.volume_capability.access_mode.mode == 1  # SINGLE_NODE_WRITER
    assert api.objects[PVC]["status"]["capacity"] == {"storage": "2Gi"}
    # A driver that does not stage gets no staging path.
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}))
    await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert client.requests[0].staging_target_path == ""


async def test_older_resizer_gets_the_pv_size_and_only_the_capacity():
    api = ObjectsAPI(_objects({"capacity": {"storage": "1Gi"}}))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}))
    await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert client.requests[0].capacity_range.required_bytes == 2 * 1024**3
    assert [p[1]["status"] for p in api.patches] == [
        {"capacity": {"storage": "2Gi"}, "conditions": []}
    ]


async def test_waits_while_the_controller_has_not_finished():
    api = ObjectsAPI(_objects(_pending(allocatedResourceStatuses={"storage": "ControllerResizeInProgress"})))  # fmt: skip
    client = ExpandingClient(frozenset({EXPAND_VOLUME}))
    await _expander(api, client).expand(POD, VOL, FS_TARGET)
    assert client.requests == [] and api.patches == []


def _rpc(code: grpc.StatusCode, desc: str = "x") -> CSIError:
    name = "".join(w.capitalize() for w in code.name.split("_"))
    return CSIError(f"rpc error: code = {name} desc = {desc}", code)


async def test_final_failure_is_a_condition_and_is_raised():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}), _rpc(grpc.StatusCode.INTERNAL))
    with pytest.raises(VolumeError) as err:
        await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert err.value.operation == "NodeExpandVolume.NodeExpandVolume"
    status = api.objects[PVC]["status"]
    cond = status["conditions"][-1]
    assert cond["type"] == "NodeResizeError" and cond["status"] == "True"
    assert cond["message"] == "failed to expand pvc with rpc error: code = Internal desc = x"
    assert status["allocatedResourceStatuses"] == {"storage": "NodeResizeInProgress"}


async def test_infeasible_size_marks_the_claim_infeasible():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}), _rpc(grpc.StatusCode.OUT_OF_RANGE))
    with pytest.raises(VolumeError):
        await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    status = api.objects[PVC]["status"]
    assert status["allocatedResourceStatuses"] == {"storage": "NodeResizeInfeasible"}
    assert status["conditions"][-1]["type"] == "NodeResizeError"


async def test_failure_after_the_user_changed_the_size_again_is_infeasible():
    # A final failure, then the user asks for another size: the next failure
    # lets the controller take the new size (markExpansionInfeasibleOnFailure).
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}), _rpc(grpc.StatusCode.INTERNAL))
    expander = _expander(api, client)
    with pytest.raises(VolumeError):
        await expander.expand(POD, VOL, FS_TARGET)
    assert api.objects[PVC]["status"]["allocatedResourceStatuses"]["storage"] != (
        "NodeResizeInfeasible"
    )
    api.objects[PVC]["spec"]["resources"]["requests"]["storage"] = "1Gi"
    with pytest.raises(VolumeError):
        await expander.expand(POD, VOL, FS_TARGET)
    assert api.objects[PVC]["status"]["allocatedResourceStatuses"] == {
        "storage": "NodeResizeInfeasible"
    }


async def test_uncertain_failure_leaves_the_claim_alone_and_is_retried():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}), _rpc(grpc.StatusCode.DEADLINE_EXCEEDED))
    expander = _expander(api, client)
    with pytest.raises(VolumeError):
        await expander.expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert [p[1]["status"] for p in api.patches] == [
        {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}
    ]
    client.fail = None
    await expander.expand(POD, BLOCK_VOL, BLOCK_TARGET)  # in progress: tried again
    assert len(client.requests) == 2
    assert api.objects[PVC]["status"]["capacity"] == {"storage": "2Gi"}


async def test_in_use_refusal_does_not_fail_the_volume_and_is_not_retried():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({EXPAND_VOLUME}), _rpc(grpc.StatusCode.FAILED_PRECONDITION))
    expander = _expander(api, client)
    await expander.expand(POD, BLOCK_VOL, BLOCK_TARGET)  # no raise: the pod keeps its volume
    assert api.objects[PVC]["status"]["conditions"][-1]["type"] == "NodeResizeError"
    await expander.expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert len(client.requests) == 1


async def test_driver_without_node_expansion():
    api = ObjectsAPI(_objects(_pending()))
    client = ExpandingClient(frozenset({STAGE_UNSTAGE}))
    with pytest.raises(VolumeError, match="NodeExpand is not supported by the CSI driver"):
        await _expander(api, client).expand(POD, BLOCK_VOL, BLOCK_TARGET)
    assert client.requests == []


async def test_read_only_volume_is_not_expanded_and_warned_once():
    api = ObjectsAPI(_objects(_pending()))
    client, events = ExpandingClient(frozenset({EXPAND_VOLUME})), Events()
    expander = _expander(api, client, events)
    ro = dataclasses.replace(BLOCK_VOL, read_only=True)
    await expander.expand(POD, ro, BLOCK_TARGET)
    await expander.expand(POD, ro, BLOCK_TARGET)
    assert client.requests == [] and api.patches == []
    msg = 'MountVolume.NodeExpandVolume failed for volume "pv1" requested read-only file system'
    assert events.seen == [
        ("Pod", "Warning", "FileSystemResizeFailed", msg),
        ("PersistentVolumeClaim", "Warning", "FileSystemResizeFailed", msg),
    ]


def _rwx(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    obj[PVC]["spec"]["accessModes"] = ["ReadWriteMany"]
    obj[PVC]["metadata"]["annotations"] = annotations
    return obj


def test_a_claim_another_node_finished_asks_only_shared_volumes_behind_here():
    def plan(o: dict[str, Any], node_size: int | None) -> Resize | None:
        return node_resize(o[PVC], o[PV], node_size)

    done = {"capacity": {"storage": "2Gi"}}
    gib = 1024**3
    # ReadWriteMany, this node last saw it at 1Gi: grown here, the claim left as it is.
    assert plan(_rwx(_objects(done)), gib) == Resize("2Gi", True, "", claim_done=True)
    assert plan(_rwx(_objects(done)), 2 * gib) is None  # this node is there too
    assert plan(_rwx(_objects(done)), None) is None  # not known here (a restart)
    assert plan(_objects(done), gib) is None  # one node's volume: the claim says done
    # The driver needs no node step, or a resize is under way: not this path.
    annotated = _rwx(_objects(done), **{"volume.kubernetes.io/node-expansion-not-required": "true"})
    assert plan(annotated, gib) is None
    pending = _rwx(_objects(_pending(capacity={"storage": "2Gi"})))
    assert plan(pending, gib) is None


async def test_shared_volume_grown_by_another_node_is_grown_here_without_a_claim_write():
    """Upstream's in-use expansion of a ReadWriteMany volume: the claim
    already records the new size (another node finished), but this node's
    volume was published at the old one, so NodeExpandVolume runs here too
    and the claim is not written again; a target published after the growth,
    or forgotten at tear-down, is not expanded."""
    o = _rwx(_objects({"capacity": {"storage": "1Gi"}}))
    o[PV]["spec"]["capacity"]["storage"] = "1Gi"
    api, client, events = ObjectsAPI(o), ExpandingClient(frozenset({EXPAND_VOLUME})), Events()
    expander = _expander(api, client, events)
    await expander.expand(POD, VOL, FS_TARGET)  # set up at 1Gi: nothing to do
    other = "/root/pods/u2/volumes/kubernetes.io~csi/pv1/mount"
    gone = "/root/pods/u3/volumes/kubernetes.io~csi/pv1/mount"
    await expander.expand(POD, VOL, gone)
    expander.forget(gone)
    # The PV and the claim grow elsewhere.
    api.objects[PV]["spec"]["capacity"]["storage"] = "2Gi"
    api.objects[PVC]["status"]["capacity"]["storage"] = "2Gi"
    await expander.expand(POD, VOL, other)  # published now: at 2Gi already
    await expander.expand(POD, VOL, gone)
    assert client.requests == []
    await expander.expand(POD, VOL, FS_TARGET)  # the remount of the old one
    (req,) = client.requests
    assert req.volume_path == FS_TARGET and req.capacity_range.required_bytes == 2 * 1024**3
    assert api.patches == []
    assert [e[2] for e in events.seen] == ["FileSystemResizeSuccessful"] * 2
    await expander.expand(POD, VOL, FS_TARGET)  # known at 2Gi now
    assert len(client.requests) == 1


async def test_one_node_volume_is_not_grown_again_once_the_claim_says_done():
    o = _objects({"capacity": {"storage": "1Gi"}})
    o[PV]["spec"]["capacity"]["storage"] = "1Gi"
    api, client = ObjectsAPI(o), ExpandingClient(frozenset({EXPAND_VOLUME}))
    expander = _expander(api, client)
    await expander.expand(POD, VOL, FS_TARGET)
    api.objects[PV]["spec"]["capacity"]["storage"] = "2Gi"
    api.objects[PVC]["status"]["capacity"]["storage"] = "2Gi"
    await expander.expand(POD, VOL, FS_TARGET)
    assert client.requests == [] and api.patches == []
