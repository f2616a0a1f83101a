"""Raw block CSI volumes, piece by piece: upstream's layout, the block access
type in the requests, the volumeMode checks, the container's CRI devices
(devicePath checked, the host side a block device itself, never a link), and
the tear-down of the block dirs (nothing followed, nothing left behind
deleted)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.mounts import make_block_devices, make_mounts
from kubelet.container.runtime import ContainerConfigError, Device, RunContainerOptions
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_config
from kubelet.volume import MountedVolume, VolumeError
from kubelet.volume.csi import paths, requests, source
from kubelet.volume.csi.plugin import scan_disk
from kubelet.volume.pvc import check_volume_mode

ROOT = "/var/lib/kubelet"
BASE = f"{ROOT}/plugins/kubernetes.io/csi/volumeDevices"


def test_layout_is_upstreams():
    assert paths.block_staging_path(ROOT, "pvc-1") == f"{BASE}/staging/pvc-1"
    assert paths.block_publish_path(ROOT, "pvc-1", "uid-1") == f"{BASE}/publish/pvc-1/uid-1"
    assert paths.block_data_dir(ROOT, "pvc-1") == f"{BASE}/pvc-1/data"
    for bad in ("..", "a/b", ""):
        with pytest.raises(VolumeError):
            paths.block_staging_path(ROOT, bad)
        with pytest.raises(VolumeError):
            paths.block_publish_path(ROOT, "pvc-1", bad)


def _vol(mode: str, **kw: Any) -> source.CSIVolume:
    return source.CSIVolume(
        "d.example.com", "h", paths.PERSISTENT, "pv", fs_type="ext4",
        mount_options=("noatime",), access_modes=("ReadWriteOnce",), volume_mode=mode, **kw,
    )  # fmt: skip


def test_block_capability_has_no_filesystem():
    cap = requests.capability(_vol("Block"), False, "42")
    assert cap.HasField("block") and not cap.HasField("mount")
    assert cap.access_mode.mode == cap.access_mode.SINGLE_NODE_WRITER
    fs = requests.capability(_vol("Filesystem"), False)
    assert fs.HasField("mount") and not fs.HasField("block")


def _pod(**container: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u", "name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "busybox", **container}]},
    }


def _pv(mode: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"csi": {"driver": "d", "volumeHandle": "h"}}
    if mode is not None:
        spec["volumeMode"] = mode
    return {"metadata": {"name": "pv"}, "spec": spec}


def test_volume_mode_mismatches_refused_with_upstreams_messages():
    mounts = _pod(volumeMounts=[{"name": "data", "mountPath": "/d"}])
    devices = _pod(volumeDevices=[{"name": "data", "devicePath": "/dev/x"}])
    with pytest.raises(VolumeError) as err:
        check_volume_mode(mounts, "data", _pv("Block"))
    assert str(err.value) == "volume data has volumeMode Block, but is specified in volumeMounts"
    for mode in ("Filesystem", None):
        with pytest.raises(VolumeError) as err:
            check_volume_mode(devices, "data", _pv(mode))
        assert str(err.value) == (
            "volume data has volumeMode Filesystem, but is specified in volumeDevices"
        )
    check_volume_mode(devices, "data", _pv("Block"))
    check_volume_mode(mounts, "data", _pv(None))
    check_volume_mode(mounts, "other", _pv("Block"))
    # An init container counts as much as a regular one.
    init = _pod()
    init["spec"]["initContainers"] = [{"name": "i", "volumeMounts": [{"name": "data"}]}]
    with pytest.raises(VolumeError):
        check_volume_mode(init, "data", _pv("Block"))


@pytest.fixture
def device(tmp_path: Path) -> str:
    if os.geteuid() != 0:
        pytest.fail("making a block device node needs root (the tests run as root)")
    path = tmp_path / "publish-file"
    os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    return str(path)


def _devices(container: dict[str, Any], vol: MountedVolume) -> list[Device]:
    return make_block_devices(container, {"data": vol})


def test_container_devices(device: str, tmp_path: Path):
    c = {"name": "c", "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}
    vol = MountedVolume("data", device, block=True)
    assert _devices(c, vol) == [Device("/dev/xvda", device, "mrw")]
    ro = MountedVolume("data", device, read_only=True, block=True)
    assert _devices(c, ro) == [Device("/dev/xvda", device, "r")]

    def refused(container: dict[str, Any], v: MountedVolume) -> str:
        with pytest.raises(ContainerConfigError) as err:
            _devices(container, v)
        return str(err.value)

    rel = {"name": "c", "volumeDevices": [{"name": "data", "devicePath": "dev/xvda"}]}
    assert refused(rel, vol) == "error DevicePath `dev/xvda` must be an absolute path"
    up = {"name": "c", "volumeDevices": [{"name": "data", "devicePath": "/dev/../etc/x"}]}
    assert refused(up, vol) == "error DevicePath `/dev/../etc/x` must not contain '..'"
    other = {"name": "c", "volumeDevices": [{"name": "nope", "devicePath": "/dev/x"}]}
    assert refused(other, vol) == 'cannot find volume "nope" to pass into container "c"'
    # A filesystem volume is never handed over as a device.
    assert "cannot find volume" in refused(c, MountedVolume("data", device))
    # The host side must itself be a block device: a link to one is refused.
    link = tmp_path / "link"
    link.symlink_to(device)
    assert "is not mapped to a block device" in refused(
        c, MountedVolume("data", str(link), block=True)
    )
    plain = tmp_path / "plain"
    plain.write_text("")
    assert "is not mapped to a block device" in refused(
        c, MountedVolume("data", str(plain), block=True)
    )


def test_block_volume_is_never_bind_mounted(device: str, tmp_path: Path):
    c = {"name": "c", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
    with pytest.raises(ContainerConfigError, match='cannot find volume "data" to mount'):
        make_mounts(_pod(), c, {"data": MountedVolume("data", device, block=True)},
                    lambda s: s, str(tmp_path))  # fmt: skip


def test_cri_config_carries_the_devices():
    pod = _pod()
    opts = RunContainerOptions(devices=[Device("/dev/xvda", "/host/pub", "mrw")])
    cfg = container_config(NodeSettings(), pod, pod["spec"]["containers"][0], 0, "img", "h", opts)
    assert [(d.container_path, d.host_path, d.permissions) for d in cfg.devices] == [
        ("/dev/xvda", "/host/pub", "mrw")
    ]


def test_block_target_removal_never_follows(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "pub"
    link.symlink_to(victim)
    paths.remove_block_target(str(link))
    assert not os.path.lexists(link) and victim.read_text() == "keep"
    d = tmp_path / "dir"
    (d / "x").mkdir(parents=True)
    paths.remove_block_target(str(d))  # not the driver's kind of target: left
    assert (d / "x").is_dir()
    paths.remove_block_target(str(tmp_path / "missing"))


def test_block_dirs_removed_only_when_empty(tmp_path: Path):
    root = str(tmp_path)
    staging = Path(paths.block_staging_path(root, "pv"))
    publish = Path(paths.block_publish_path(root, "pv", "u")).parent
    data = Path(paths.block_data_dir(root, "pv"))
    for d in (staging, publish, data):
        d.mkdir(parents=True)
    paths.save_vol_data(str(data), {"driverName": "d.example.com", "volumeHandle": "h"})
    (publish / "u").write_text("left by a driver")
    with pytest.raises(VolumeError, match="failed to remove"):
        paths.remove_block_dirs(root, "pv")
    assert (publish / "u").read_text() == "left by a driver"
    (publish / "u").unlink()
    paths.remove_block_dirs(root, "pv")
    assert not staging.exists() and not publish.exists() and not data.parent.exists()
    assert (tmp_path / "plugins/kubernetes.io/csi/volumeDevices/staging").is_dir()


def test_reconstruction_finds_block_volumes(device: str, tmp_path: Path):
    root = str(tmp_path)
    pod_dir = tmp_path / "pods/u1/volumes/kubernetes.io~csi/pv"
    pod_dir.mkdir(parents=True)
    record = {"driverName": "d.example.com", "volumeHandle": "h", "volumeMode": "Block",
              "volumeLifecycleMode": "Persistent", "specVolID": "pv"}  # fmt: skip
    paths.save_vol_data(str(pod_dir), record)
    Path(paths.block_staging_path(root, "pv")).mkdir(parents=True)
    data = Path(paths.block_data_dir(root, "pv"))
    data.mkdir(parents=True)
    paths.save_vol_data(str(data), {"driverName": "d.example.com", "volumeHandle": "h"})
    found, staged = scan_disk(root)
    assert not found[str(pod_dir)].mounted  # no device published yet
    assert staged == [("d.example.com", "h", paths.block_staging_path(root, "pv"), "pv")]
    publish = Path(paths.block_publish_path(root, "pv", "u1"))
    publish.parent.mkdir(parents=True)
    os.link(device, publish)  # the same device node, as the driver's bind mount shows it
    found, _ = scan_disk(root)
    assert found[str(pod_dir)].mounted


def test_pod_device_link_never_replaces_or_follows_anything_else(tmp_path: Path):
    root = str(tmp_path)
    link = Path(paths.pod_device_link(root, "u1", "pv"))
    assert str(link) == f"{root}/pods/u1/volumeDevices/kubernetes.io~csi/pv"
    paths.make_pod_device_link(str(link), "/publish/a")
    paths.make_pod_device_link(str(link), "/publish/b")  # a stale link is replaced
    assert os.readlink(link) == "/publish/b"
    paths.remove_pod_device_link(str(link))
    assert not (tmp_path / "pods/u1/volumeDevices").exists() and (tmp_path / "pods/u1").is_dir()
    link.parent.mkdir(parents=True)
    link.write_text("not ours")
    with pytest.raises(VolumeError, match="not a symbolic link"):
        paths.make_pod_device_link(str(link), "/publish/a")
    paths.remove_pod_device_link(str(link))
    assert link.read_text() == "not ours"
