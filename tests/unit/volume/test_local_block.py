"""Block `local` PVs (volume/local.py): the device a PV's path names, found
by resolving links the kubelet reads itself; a path through the kubelet's
root dir (where pods can plant links), a link loop, or anything that is not
a block device is refused, and the runtime only ever gets the device node."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.mounts import make_block_devices
from kubelet.container.runtime import Device
from kubelet.volume import VolumeError
from kubelet.volume.local import block_device, resolve
from kubelet.volume.pvc import PVCPlugin
from tests.unit.volume.helpers import ObjectsAPI


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A fake node: dev/ with a block device node, the kubelet's root dir."""
    if os.geteuid() != 0:
        pytest.fail("making a block device node needs root (the tests run as root)")
    (tmp_path / "dev").mkdir()
    (tmp_path / "kubelet").mkdir()
    os.mknod(tmp_path / "dev/sdz", stat.S_IFBLK | 0o600, os.makedev(7, 251))
    return tmp_path


def test_a_device_named_directly_or_through_links(node: Path):
    dev = str(node / "dev/sdz")
    assert block_device("pv1", dev, str(node / "kubelet")) == dev
    # udev-style relative link, and a discovery dir of absolute links.
    (node / "dev/disk/by-id").mkdir(parents=True)
    os.symlink("../../sdz", node / "dev/disk/by-id/wwn-1")
    (node / "disks").mkdir()
    os.symlink(str(node / "dev/disk/by-id/wwn-1"), node / "disks/vol1")
    assert block_device("pv1", str(node / "disks/vol1"), str(node / "kubelet")) == dev
    assert resolve(str(node / "disks/vol1")) == dev


def test_refused_paths(node: Path):
    root = str(node / "kubelet")

    def refused(path: str) -> VolumeError:
        with pytest.raises(VolumeError) as err:
            block_device("pv1", path, root)
        return err.value

    (node / "file").write_text("x")
    assert (
        str(refused(str(node / "file"))) == f'local volume "pv1": {node}/file is not a block device'
    )
    assert str(refused(str(node / "dev"))).endswith("is not a block device")
    assert "must not contain '..'" in str(refused(str(node / "dev/../dev/sdz")))
    assert "is not absolute" in str(refused("dev/sdz"))
    missing = refused(str(node / "nothing"))
    assert missing.operation == "MapVolume.EvalHostSymlinks"
    assert str(missing) == f"lstat {node}/nothing: no such file or directory"
    os.symlink("loop", node / "loop")
    assert "too many levels of symbolic links" in str(refused(str(node / "loop")))
    # A link a pod could have planted: anything through the kubelet's root
    # dir is refused, even when it ends at a real device.
    pod_vol = node / "kubelet/pods/u/volumes/kubernetes.io~empty-dir/v"
    pod_vol.mkdir(parents=True)
    os.symlink(str(node / "dev/sdz"), pod_vol / "planted")
    os.symlink(str(pod_vol / "planted"), node / "innocent")
    for path in (pod_vol / "planted", node / "innocent"):
        err = refused(str(path))
        assert "passes through the kubelet's root dir" in str(err), path
    # A device node in the root dir itself (a pod cannot mknod, but a
    # privileged one could): refused as well.
    os.mknod(pod_vol / "node", stat.S_IFBLK | 0o600, os.makedev(7, 251))
    assert "passes through the kubelet's root dir" in str(refused(str(pod_vol / "node")))


def _objects(path: str) -> dict[str, Any]:
    """The claim ns/claim bound to the Block local PV pv1 at `path`."""
    return {
        "/api/v1/namespaces/ns/persistentvolumeclaims/claim": {
            "metadata": {"name": "claim", "namespace": "ns", "uid": "c1"},
            "spec": {"volumeName": "pv1"},
            "status": {"phase": "Bound"},
        },
        "/api/v1/persistentvolumes/pv1": {
            "metadata": {"name": "pv1"},
            "spec": {"claimRef": {"uid": "c1"}, "volumeMode": "Block", "local": {"path": path}},
        },
    }


def vol(read_only: bool = False) -> dict[str, Any]:
    return {"name": "data", "persistentVolumeClaim": {"claimName": "claim", "readOnly": read_only}}


async def test_block_local_pv_is_handed_to_volume_devices(node: Path):
    os.symlink(str(node / "dev/sdz"), node / "by-id")
    plugin = PVCPlugin(ObjectsAPI(_objects(str(node / "by-id"))).get, str(node / "kubelet"))
    mv = await plugin.set_up_volume({"metadata": {"namespace": "ns", "uid": "u"}}, vol(), "/x")
    assert (mv.host_path, mv.block, mv.read_only) == (str(node / "dev/sdz"), True, False)
    c = {"name": "c", "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}
    assert make_block_devices(c, {"data": mv}) == [
        Device("/dev/xvda", str(node / "dev/sdz"), "mrw")
    ]
    ro = await plugin.set_up_volume(
        {"metadata": {"namespace": "ns", "uid": "u"}}, vol(read_only=True), "/x"
    )
    assert make_block_devices(c, {"data": ro}) == [Device("/dev/xvda", str(node / "dev/sdz"), "r")]
    # The ownership walk of a local PV's fsGroup is never run on a device.
    fs_group = {"metadata": {"namespace": "ns", "uid": "u"},
                "spec": {"securityContext": {"fsGroup": 1234}}}  # fmt: skip
    await plugin.set_up_volume(fs_group, vol(), "/x")
    assert os.stat(node / "dev/sdz").st_gid == 0
