"""The CSI plugin's parts without a driver: version and name checks of
registration, the node info written to the API (CSINode, Node), the wait for
attach, volume sources and request fields."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from kubelet.pluginmanager import PluginError
from kubelet.volume import VolumeError
from kubelet.volume.csi import attach, paths, requests, source, validate_driver_name
from kubelet.volume.csi.client import SINGLE_NODE_MULTI_WRITER, NodeInfo
from kubelet.volume.csi.drivers import (
    DriversStore,
    RegistrationHandler,
    highest_supported,
    parse_version,
)
from kubelet.volume.csi.nodeinfo import NODE_ID_ANNOTATION, NodeInfoError, NodeInfoManager
from tests.unit.volume.helpers import ObjectsAPI

# ------------------------------------------------------------- registration


def test_versions_and_names():
    assert parse_version("v1.2.3") == (1, 2, 3)
    assert parse_version("1.0") == (1, 0)
    assert parse_version("1") is None  # at least two parts (ParseGeneric)
    assert parse_version("01.0") is None
    assert highest_supported(["0.3.0", "1.0.0", "1.5", "2.0.0"]) == (1, 5)
    with pytest.raises(PluginError, match="empty list"):
        highest_supported([])
    with pytest.raises(PluginError, match=r"need v1\.x"):
        highest_supported(["2.0.0", "0.9.0"])
    assert validate_driver_name("hostpath.csi.k8s.io") is None
    for bad in ("", "a/b", "../x", "UPPER_", "x" * 64, "-a"):
        assert validate_driver_name(bad) is not None, bad


class FakeClient:
    def __init__(self, driver: str, endpoint: str) -> None:
        self.endpoint = endpoint
        self.closed = False
        self.info: NodeInfo | Exception = NodeInfo("node-1", 3, {"zone": "a"})

    async def node_get_info(self, timeout: float | None = None) -> NodeInfo:
        if isinstance(self.info, Exception):
            raise self.info
        return self.info

    async def close(self) -> None:
        self.closed = True


class FakeNodeInfo:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def install_driver(self, driver: str, info: NodeInfo) -> None:
        self.calls.append(("install", driver))

    async def uninstall_driver(self, driver: str) -> None:
        self.calls.append(("uninstall", driver))


async def test_registration_handler():
    store, ni = DriversStore(), FakeNodeInfo()
    clients: list[FakeClient] = []

    def factory(driver: str, endpoint: str) -> Any:
        clients.append(FakeClient(driver, endpoint))
        return clients[-1]

    h = RegistrationHandler(store, ni, factory)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="not a DNS-1123 subdomain"):
        h.validate_plugin("../evil", "/s", ["1.0.0"])
    await h.register_plugin("d.example.com", "/a.sock", ["1.0.0"], None)
    assert store.get("d.example.com").endpoint == "/a.sock"  # type: ignore[union-attr]
    assert ni.calls == [("install", "d.example.com")]
    with pytest.raises(PluginError, match=r"higher supported version: 1\.0\.0"):
        h.validate_plugin("d.example.com", "/b.sock", ["1.0.0"])
    h.validate_plugin("d.example.com", "/b.sock", ["1.1.0"])  # a newer version may replace it
    # The socket of an instance no longer registered going away changes nothing.
    await h.deregister_plugin("d.example.com", "/other.sock")
    assert store.get("d.example.com") is not None
    await h.deregister_plugin("d.example.com", "/a.sock")
    assert store.get("d.example.com") is None and clients[0].closed
    assert ni.calls[-1] == ("uninstall", "d.example.com")


async def test_registration_undone_when_node_get_info_fails():
    store, ni = DriversStore(), FakeNodeInfo()

    def factory(driver: str, endpoint: str) -> Any:
        c = FakeClient(driver, endpoint)
        c.info = VolumeError("rpc error: code = Unavailable desc = connection refused")
        return c

    h = RegistrationHandler(store, ni, factory)  # type: ignore[arg-type]
    with pytest.raises(VolumeError, match="Unavailable"):
        await h.register_plugin("d.example.com", "/a.sock", ["1.0.0"], None)
    assert store.get("d.example.com") is None
    assert ni.calls == [("uninstall", "d.example.com")]


# ---------------------------------------------------------------- node info


async def test_node_info_written_to_csinode_and_node():
    api = ObjectsAPI({"/api/v1/nodes/n1": {"metadata": {"name": "n1", "uid": "node-uid"}}})
    api.objects["/api/v1/nodes/n1"]["metadata"]["resourceVersion"] = "1"
    nim = NodeInfoManager(api, "n1")  # type: ignore[arg-type]
    stop = asyncio.Event()
    await nim.initialize(stop)
    assert nim.init_error is None
    csinode = api.objects["/apis/storage.k8s.io/v1/csinodes/n1"]
    assert csinode["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid"}
    ]
    await nim.install_driver("d.example.com", NodeInfo("id-1", 7, {"z/b": "1", "z/a": "2"}))
    drivers = api.objects["/apis/storage.k8s.io/v1/csinodes/n1"]["spec"]["drivers"]
    assert drivers == [
        {"name": "d.example.com", "nodeID": "id-1", "topologyKeys": ["z/a", "z/b"],
         "allocatable": {"count": 7}}
    ]  # fmt: skip
    node = api.objects["/api/v1/nodes/n1"]
    assert json.loads(node["metadata"]["annotations"][NODE_ID_ANNOTATION]) == {
        "d.example.com": "id-1"
    }
    assert node["metadata"]["labels"] == {"z/b": "1", "z/a": "2"}
    # A second driver reporting a different value for a label is refused.
    with pytest.raises(NodeInfoError, match="topology value collision"):
        await nim.install_driver("e.example.com", NodeInfo("id-2", 0, {"z/a": "other"}))
    await nim.uninstall_driver("d.example.com")
    assert api.objects["/apis/storage.k8s.io/v1/csinodes/n1"]["spec"]["drivers"] == []
    assert NODE_ID_ANNOTATION not in api.objects["/api/v1/nodes/n1"]["metadata"]["annotations"]


async def test_node_info_refuses_an_empty_node_id():
    nim = NodeInfoManager(ObjectsAPI(), "n1")  # type: ignore[arg-type]
    with pytest.raises(NodeInfoError, match="driverNodeID must not be empty"):
        await nim.install_driver("d.example.com", NodeInfo("", 0, {}))


# ------------------------------------------------------------------- attach


def test_attachment_status():
    assert attach.attachment_status({"status": {"attached": False}}, "h") is None
    ok = {"status": {"attached": True, "attachmentMetadata": {"dev": "/dev/x"}}}
    assert attach.attachment_status(ok, "h") == {"dev": "/dev/x"}
    with pytest.raises(attach.AttachError, match="no such disk"):
        attach.attachment_status({"status": {"attachError": {"message": "no such disk"}}}, "h")
    with pytest.raises(attach.AttachError, match="being deleted"):
        attach.attachment_status({"metadata": {"deletionTimestamp": "x"}}, "h")


async def test_wait_for_attach_polls_until_attached():
    name = paths.attachment_name("h", "d.example.com", "n1")
    api = ObjectsAPI()

    async def attach_later() -> None:
        await asyncio.sleep(0.3)
        api.objects[attach.PATH + name] = {"metadata": {}, "status": {"attached": False}}
        await asyncio.sleep(0.3)
        api.objects[attach.PATH + name]["status"] = {
            "attached": True,
            "attachmentMetadata": {"attachedTo": "n1"},
        }

    task = asyncio.ensure_future(attach_later())
    ctx = await attach.wait_for_attach(api, "d.example.com", "h", "n1", timeout=30)  # type: ignore[arg-type]
    await task
    assert ctx == {"attachedTo": "n1"}
    with pytest.raises(attach.AttachError, match="timed out waiting for attach: volume attachment"):
        await attach.wait_for_attach(api, "d.example.com", "other", "n1", timeout=0.5)  # type: ignore[arg-type]


# ---------------------------------------------------------- sources, fields


def test_sources():
    pod = {"metadata": {"uid": "u1", "namespace": "ns", "name": "p"}}
    inline = source.from_spec(
        pod,
        {"name": "v", "csi": {"driver": "d.example.com", "readOnly": True,
                              "nodePublishSecretRef": {"name": "s"}}},
    )  # fmt: skip
    assert inline.mode == paths.EPHEMERAL and inline.read_only
    assert inline.handle == paths.inline_volume_handle("u1", "v") and inline.dir_name == "v"
    assert inline.publish_secret == ("ns", "s")  # always the pod's namespace
    pv = {
        "metadata": {"name": "pv1"},
        "spec": {
            "accessModes": ["ReadWriteOncePod"],
            "mountOptions": ["noatime"],
            "csi": {"driver": "d.example.com", "volumeHandle": "h1", "fsType": "ext4",
                    "nodeStageSecretRef": {"name": "st", "namespace": "sec"}},
        },
    }  # fmt: skip
    vol = source.from_spec(pod, source.pv_spec_for("data", pv, True, ("ns", "c")))
    assert (vol.handle, vol.dir_name, vol.read_only, vol.fs_type) == ("h1", "pv1", True, "ext4")
    assert vol.stage_secret == ("sec", "st") and vol.claim == ("ns", "c")
    assert vol.csi_access_mode(False) == "SINGLE_NODE_WRITER"
    assert vol.csi_access_mode(True) == "SINGLE_NODE_SINGLE_WRITER"
    bad = copy.deepcopy(pv)
    bad["metadata"]["name"] = "../../etc"
    with pytest.raises(VolumeError, match="invalid volume name"):
        source.from_spec(pod, source.pv_spec_for("data", bad, False, ("ns", "c")))
    bad["metadata"]["name"], bad["spec"]["csi"]["driver"] = "ok", "../x"
    with pytest.raises(VolumeError, match="DNS-1123"):
        source.from_spec(pod, source.pv_spec_for("data", bad, False, ("ns", "c")))


def test_request_fields():
    vol = source.CSIVolume("d.example.com", "h", paths.PERSISTENT, "pv", fs_type="ext4",
                           access_modes=("ReadWriteOnce",), mount_options=("ro",))  # fmt: skip
    cap = requests.capability(vol, SINGLE_NODE_MULTI_WRITER in {SINGLE_NODE_MULTI_WRITER}, "42")
    assert cap.access_mode.mode == cap.AccessMode.SINGLE_NODE_MULTI_WRITER
    assert (cap.mount.fs_type, list(cap.mount.mount_flags), cap.mount.volume_mount_group) == (
        "ext4", ["ro"], "42")  # fmt: skip
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"serviceAccountName": "sa"}}  # fmt: skip
    assert requests.pod_info(pod, vol) == {
        "csi.storage.k8s.io/pod.name": "p",
        "csi.storage.k8s.io/pod.namespace": "ns",
        "csi.storage.k8s.io/pod.uid": "u",
        "csi.storage.k8s.io/serviceAccount.name": "sa",
        "csi.storage.k8s.io/ephemeral": "false",
    }
    # fsGroup by the kubelet: the driver's policy, fsType and access modes decide.
    assert requests.applies_fs_group(vol, 1000, "ReadWriteOnceWithFSType")
    assert not requests.applies_fs_group(vol, None, "File")
    assert not requests.applies_fs_group(vol, 1000, "None")
    rwx = source.CSIVolume("d", "h", paths.PERSISTENT, "pv", fs_type="ext4",
                           access_modes=("ReadWriteMany",))  # fmt: skip
    assert not requests.applies_fs_group(rwx, 1000, "ReadWriteOnceWithFSType")
    assert requests.applies_fs_group(rwx, 1000, "File")
    no_fs = source.CSIVolume("d", "h", paths.PERSISTENT, "pv", access_modes=("ReadWriteOnce",))
    assert not requests.applies_fs_group(no_fs, 1000, "ReadWriteOnceWithFSType")


async def test_secrets_are_decoded_from_the_api():
    api = ObjectsAPI({"/api/v1/namespaces/ns/secrets/s": {"data": {"key": "dmFsdWU="}}})
    assert await requests.secrets(api, ("ns", "s"), "NodePublishSecretRef") == {"key": "value"}  # type: ignore[arg-type]
    with pytest.raises(VolumeError, match="fetching NodeStageSecretRef ns/missing failed"):
        await requests.secrets(api, ("ns", "missing"), "NodeStageSecretRef")  # type: ignore[arg-type]
