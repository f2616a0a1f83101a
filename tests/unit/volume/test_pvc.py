"""persistentVolumeClaim volumes resolved through a fake API getter."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.client.rest import APIError
from kubelet.util.clock import FakeClock
from kubelet.volume import VolumeError, VolumeHost
from kubelet.volume.pvc import PVCPlugin
from kubelet.volumemanager.manager import ATTACH_AND_MOUNT_TIMEOUT, VolumeManagerImpl

POD = {"metadata": {"uid": "u1", "name": "p", "namespace": "ns"}, "spec": {}}
PVC_PATH = "/api/v1/namespaces/ns/persistentvolumeclaims/claim"
PV_PATH = "/api/v1/persistentvolumes/pv1"


def claim(phase: str = "Bound", volume: str = "pv1", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "claim", "namespace": "ns", "uid": "pvc-uid", **meta},
        "spec": {"volumeName": volume},
        "status": {"phase": phase},
    }


def pv(source: dict[str, Any], claim_uid: str = "pvc-uid", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "pv1"},
        "spec": {"claimRef": {"name": "claim", "namespace": "ns", "uid": claim_uid},
                 "capacity": {"storage": "1Gi"}, **source, **spec},
    }  # fmt: skip


class API:
    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.calls: list[str] = []

    async def get(self, path: str) -> Any:
        self.calls.append(path)
        obj = self.objects.get(path)
        if obj is None:
            name = path.rsplit("/", 1)[1]
            kind = path.rsplit("/", 2)[1]
            raise APIError(404, "NotFound", f'{kind} "{name}" not found')
        return obj


def vol(read_only: bool = False) -> dict[str, Any]:
    return {"name": "data", "persistentVolumeClaim": {"claimName": "claim", "readOnly": read_only}}


async def set_up(objects: dict[str, Any], read_only: bool = False):
    return await PVCPlugin(API(objects).get).set_up_volume(POD, vol(read_only), "/unused")


async def fails(objects: dict[str, Any]) -> str:
    with pytest.raises(VolumeError) as err:
        await set_up(objects)
    return str(err.value)


async def test_host_path_pv(tmp_path: Path):
    objects = {
        PVC_PATH: claim(),
        PV_PATH: pv({"hostPath": {"path": str(tmp_path), "type": "Directory"}}),
    }
    mv = await set_up(objects)
    assert mv.name == "data" and mv.host_path == str(tmp_path) and not mv.read_only
    assert (await set_up(objects, read_only=True)).read_only
    objects[PV_PATH] = pv(
        {"hostPath": {"path": str(tmp_path / "new"), "type": "DirectoryOrCreate"}}
    )
    await set_up(objects)
    assert (tmp_path / "new").is_dir()
    f = tmp_path / "f"
    f.write_text("")
    objects[PV_PATH] = pv({"hostPath": {"path": str(f), "type": "Directory"}})
    assert (
        await fails(objects) == f"hostPath type check failed: {f} is not a directory, it's a File"
    )


async def test_local_pv(tmp_path: Path):
    objects = {PVC_PATH: claim(), PV_PATH: pv({"local": {"path": str(tmp_path)}})}
    assert (await set_up(objects)).host_path == str(tmp_path)
    objects[PV_PATH] = pv({"local": {"path": str(tmp_path / "gone")}})
    assert await fails(objects) == f"stat {tmp_path / 'gone'}: no such file or directory"


def _fs_group_pod(gid: int, policy: str | None = None) -> dict[str, Any]:
    sc: dict[str, Any] = {"fsGroup": gid}
    if policy:
        sc["fsGroupChangePolicy"] = policy
    return {**POD, "spec": {"securityContext": sc}}


async def test_local_pv_takes_the_fs_group(tmp_path: Path):
    """A local PV gets the pod's fsGroup on everything in it (group rw, setgid
    directories), a read-only claim and a hostPath PV do not (as upstream)."""
    data = tmp_path / "pv"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f").write_text("x")
    (data / "sub" / "f").chmod(0o600)
    (data / "link").symlink_to("/etc/hostname")
    objects = {PVC_PATH: claim(), PV_PATH: pv({"local": {"path": str(data)}})}
    plugin = PVCPlugin(API(objects).get)
    await plugin.set_up_volume(_fs_group_pod(4321), vol(read_only=True), "/unused")
    assert (data / "sub" / "f").stat().st_gid != 4321
    await plugin.set_up_volume(_fs_group_pod(4321), vol(), "/unused")
    for path in (data, data / "sub", data / "sub" / "f"):
        assert path.stat().st_gid == 4321, path
    assert (data / "link").lstat().st_gid == 4321
    assert (data / "sub" / "f").stat().st_mode & 0o7777 == 0o660
    assert (data / "sub").stat().st_mode & 0o2070 == 0o2070
    assert Path("/etc/hostname").stat().st_gid != 4321  # a link is not followed
    host = tmp_path / "host"
    host.mkdir()
    objects[PV_PATH] = pv({"hostPath": {"path": str(host)}})
    await plugin.set_up_volume(_fs_group_pod(4321), vol(), "/unused")
    assert host.stat().st_gid != 4321


async def test_fs_group_change_policy_on_root_mismatch(tmp_path: Path):
    """OnRootMismatch leaves the volume alone when its root already matches;
    Always (the default) walks it every time."""
    data = tmp_path / "pv"
    data.mkdir()
    objects = {PVC_PATH: claim(), PV_PATH: pv({"local": {"path": str(data)}})}
    plugin = PVCPlugin(API(objects).get)
    await plugin.set_up_volume(_fs_group_pod(4321), vol(), "/unused")
    (data / "new").write_text("x")  # made by someone outside the fsGroup
    os.chown(data / "new", 0, 0)
    await plugin.set_up_volume(_fs_group_pod(4321, "OnRootMismatch"), vol(), "/unused")
    assert (data / "new").stat().st_gid == 0
    await plugin.set_up_volume(_fs_group_pod(4321, "Always"), vol(), "/unused")
    assert (data / "new").stat().st_gid == 4321
    # A root whose group changed is a mismatch: the walk runs again.
    os.chown(data / "new", 0, 0)
    os.chown(data, 0, 0)
    await plugin.set_up_volume(_fs_group_pod(4321, "OnRootMismatch"), vol(), "/unused")
    assert (data / "new").stat().st_gid == 4321


async def test_unsupported_pv_types():
    objects = {
        PVC_PATH: claim(),
        PV_PATH: pv({"nfs": {"server": "s", "path": "/"}}),
    }
    msg = await fails(objects)
    assert msg == (
        "PersistentVolume pv1 (claim ns/claim) is a nfs volume: only hostPath, local and CSI "
        "persistent volumes are supported by this kubelet"
    )
    objects[PV_PATH] = pv({"local": {"path": "/tmp"}}, volumeMode="Block")
    assert await fails(objects) == 'local volume "pv1": /tmp is not a block device'
    # No block mapper serves a hostPath PV, as upstream.
    objects[PV_PATH] = pv({"hostPath": {"path": "/dev/null"}}, volumeMode="Block")
    assert await fails(objects) == (
        'PersistentVolume pv1 is a hostPath volume with volumeMode "Block": no volume plugin '
        "maps it as a block device (only local and CSI ones)"
    )


async def test_claim_problems():
    prefix = "error processing PVC ns/claim"
    assert await fails({}) == (
        f'{prefix}: failed to fetch PVC from API server: persistentvolumeclaims "claim" not found'
    )
    assert await fails({PVC_PATH: claim("Pending", "")}) == (
        f'{prefix}: PVC ns/claim has non-bound phase ("Pending") or empty pvc.Spec.VolumeName ("")'
    )
    deleting = claim(deletionTimestamp="2026-01-01T00:00:00Z")
    assert await fails({PVC_PATH: deleting}) == (
        f"{prefix}: can't start pod because PVC ns/claim is being deleted"
    )
    assert await fails({PVC_PATH: claim()}) == (
        f'{prefix}: failed to fetch PV pv1 from API server: persistentvolumes "pv1" not found'
    )
    other = pv({"hostPath": {"path": "/tmp"}}, claim_uid="someone-else")
    assert await fails({PVC_PATH: claim(), PV_PATH: other}) == (
        f"{prefix}: found PV object pv1 but its ClaimRef.UID someone-else "
        "does not point to claimed PVC.UID pvc-uid"
    )
    no_ref = pv({"hostPath": {"path": "/tmp"}})
    del no_ref["spec"]["claimRef"]
    assert await fails({PVC_PATH: claim(), PV_PATH: no_ref}) == (
        f"{prefix}: found PV object pv1 but it has a nil or empty ClaimRef"
    )


async def test_standalone_has_no_api():
    with pytest.raises(VolumeError, match="standalone mode"):
        await PVCPlugin(None).set_up_volume(POD, vol(), "/unused")


async def test_through_the_manager(tmp_path: Path):
    """A claim that is Pending is only logged at first (upstream's populator
    logs it), a FailedMount event once the pod has waited as long as
    upstream's WaitForAttachAndMount; once Bound the retry mounts it,
    read-only as the claim source says."""
    api = API({PVC_PATH: claim("Pending", "")})
    events: list[str] = []
    ready: list[str] = []
    clock = FakeClock()
    mgr = VolumeManagerImpl(
        VolumeHost(str(tmp_path), "n"),
        [PVCPlugin(api.get)],
        on_pod_ready=ready.append,
        recorder=lambda ref, t, r, m: events.append(f"{r} {m}"),
        clock=clock,
    )
    pod = {**POD, "spec": {"volumes": [vol(read_only=True)]}}
    mgr.add_pod(pod)
    for _ in range(5):
        mgr.reconcile()
        await asyncio.sleep(0)
    assert events == [] and PVC_PATH in api.calls
    clock.step(ATTACH_AND_MOUNT_TIMEOUT)
    for _ in range(5):
        mgr.reconcile()
        await asyncio.sleep(0)
    assert events == [
        'FailedMount MountVolume.SetUp failed for volume "data" : error processing PVC ns/claim: '
        'PVC ns/claim has non-bound phase ("Pending") or empty pvc.Spec.VolumeName ("")'
    ]
    api.objects[PVC_PATH] = claim()
    api.objects[PV_PATH] = pv({"hostPath": {"path": str(tmp_path)}})
    clock.step(0.5)
    for _ in range(5):
        mgr.reconcile()
        await asyncio.sleep(0)
    assert ready == ["u1"]
    mv = mgr.get_mounted_volumes("u1")["data"]
    assert mv.host_path == str(tmp_path) and mv.read_only
    mgr.remove_pod("u1")
    for _ in range(10):
        mgr.reconcile()
        await asyncio.sleep(0.01)
    assert await mgr.wait_for_unmount("u1", 1)
    assert tmp_path.is_dir()  # the PV's path is never removed


EPH_PATH = "/api/v1/namespaces/ns/persistentvolumeclaims/p-scratch"


def _eph_claim(owner_uid: str, controller: bool = True) -> dict[str, Any]:
    c = claim()
    c["metadata"]["name"] = "p-scratch"
    c["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": controller}
    ]
    return c


async def test_generic_ephemeral_volume_uses_the_pods_own_claim(tmp_path: Path):
    data = tmp_path / "pv"
    data.mkdir()
    spec = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    plugin = PVCPlugin(
        API({EPH_PATH: _eph_claim("u1"), PV_PATH: pv({"local": {"path": str(data)}})}).get
    )
    assert plugin.can_support(spec)
    mounted = await plugin.set_up_volume(POD, spec, "/unused")
    assert mounted.host_path == str(data)


async def test_generic_ephemeral_claim_not_controlled_by_the_pod_is_refused():
    spec = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    for other in (_eph_claim("someone-else"), _eph_claim("u1", controller=False), claim()):
        other["metadata"]["name"] = "p-scratch"
        plugin = PVCPlugin(API({EPH_PATH: other, PV_PATH: pv({"local": {"path": "/"}})}).get)
        with pytest.raises(VolumeError) as err:
            await plugin.set_up_volume(POD, spec, "/unused")
        assert str(err.value) == (
            "error processing PVC ns/p-scratch: PVC ns/p-scratch was not created for pod ns/p "
            "(pod is not owner)"
        )


async def test_claim_bound_to_a_csi_pv_resolves_to_the_csi_plugin():
    csi_pv = pv(
        {"csi": {"driver": "d.example.com", "volumeHandle": "h"}}, accessModes=["ReadWriteOnce"]
    )
    plugin = PVCPlugin(API({PVC_PATH: claim(), PV_PATH: csi_pv}).get)
    res = await plugin.resolve(POD, vol(read_only=True))
    assert res is not None
    assert (res.plugin_name, res.dir_name) == ("kubernetes.io/csi", "pv1")
    assert res.spec == {
        "name": "data",
        "persistentVolume": csi_pv,
        "readOnly": True,
        "claim": {"namespace": "ns", "name": "claim"},
    }
    local = PVCPlugin(API({PVC_PATH: claim(), PV_PATH: pv({"local": {"path": "/"}})}).get)
    assert await local.resolve(POD, vol()) is None
    # An unbound claim is an error to retry, as for set-up.
    unbound = PVCPlugin(API({PVC_PATH: claim(phase="Pending")}).get)
    with pytest.raises(VolumeError, match="non-bound phase"):
        await unbound.resolve(POD, vol())
