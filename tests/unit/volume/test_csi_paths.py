"""Tear-down of the driver-controlled entries of the CSI layout (`mount`,
`globalmount`) never follows a link, never deletes what is in them, and
never removes anything still mounted; vol_data.json is read without
following links and checked. Mount cases need root."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kubelet.util import mountutil
from kubelet.volume import VolumeError
from kubelet.volume.csi import paths

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


def _volume(tmp_path: Path) -> tuple[Path, Path]:
    dir = tmp_path / "pods/u/volumes/kubernetes.io~csi/pv1"
    dir.mkdir(parents=True)
    paths.save_vol_data(str(dir), {"driverName": "d.example.com", "volumeHandle": "h"})
    return dir, dir / "mount"


def test_layout():
    # The handle (the driver's, possibly with slashes) only ever appears hashed.
    digest = hashlib.sha256(b"vol/../x").hexdigest()
    assert paths.device_mount_path("/r", "d.example.com", "vol/../x") == (
        f"/r/plugins/kubernetes.io/csi/d.example.com/{digest}/globalmount"
    )
    with pytest.raises(VolumeError, match="DNS-1123"):
        paths.device_mount_path("/r", "../../etc", "h")
    with pytest.raises(VolumeError, match="volume handle is empty"):
        paths.device_mount_path("/r", "d.example.com", "")


def test_link_left_by_the_driver_is_unlinked_not_followed(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("x")
    dir, target = _volume(tmp_path)
    target.symlink_to(victim)
    paths.remove_mount_dir(str(target))
    assert (victim / "precious").read_text() == "x"
    assert not dir.exists()


def test_content_left_in_the_target_is_kept(tmp_path: Path):
    dir, target = _volume(tmp_path)
    target.mkdir()
    (target / "data").write_text("x")
    with pytest.raises(VolumeError, match="failed to remove dir"):
        paths.remove_mount_dir(str(target))
    assert (target / "data").read_text() == "x"
    assert (dir / "vol_data.json").exists()


@needs_root
def test_mounted_target_is_not_removed_and_links_to_mounts_are_not_mounts(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "data").write_text("x")
    dir, target = _volume(tmp_path)
    target.mkdir()
    mountutil.mount(str(src), str(target), "", "", mountutil.MS_BIND)
    try:
        with pytest.raises(VolumeError, match="is still mounted"):
            paths.remove_mount_dir(str(target))
        assert (target / "data").read_text() == "x"
        # A link the driver leaves pointing at a mount is judged as the link.
        link = dir / "link"
        link.symlink_to(target)
        assert paths.is_mount_point(str(target)) and not paths.is_mount_point(str(link))
        link.unlink()
    finally:
        mountutil.umount(str(target))
    assert not paths.is_mount_point(str(target))
    # A mount below the target (a driver that mounted into a subdir) keeps it too.
    (target / "sub").mkdir()
    mountutil.mount(str(src), str(target / "sub"), "", "", mountutil.MS_BIND)
    try:
        with pytest.raises(VolumeError, match="has mounts under it"):
            paths.remove_mount_dir(str(target))
        assert paths.mounts_below(str(target)) == [str(target / "sub")]
    finally:
        mountutil.umount(str(target / "sub"))
    (target / "sub").rmdir()
    paths.remove_mount_dir(str(target))
    assert not dir.exists() and (src / "data").read_text() == "x"


def test_vol_data_is_read_safely(tmp_path: Path):
    dir = tmp_path / "v"
    dir.mkdir()
    with pytest.raises(FileNotFoundError):
        paths.load_vol_data(str(dir))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"driverName": "d.example.com"}')
    (dir / "vol_data.json").symlink_to(elsewhere)
    with pytest.raises(VolumeError, match="failed to open volume data file"):
        paths.load_vol_data(str(dir))
    (dir / "vol_data.json").unlink()
    (dir / "vol_data.json").write_text('{"driverName": "../../x"}')
    with pytest.raises(VolumeError, match="DNS-1123"):
        paths.load_vol_data(str(dir))
    (dir / "vol_data.json").write_text('{"driverName": ' + '"a"' * 1 + ', "x": 1}')
    with pytest.raises(VolumeError, match="not a JSON object of strings"):
        paths.load_vol_data(str(dir))
    (dir / "vol_data.json").write_text(" " * (paths.MAX_VOL_DATA + 1))
    with pytest.raises(VolumeError, match="not a JSON object of strings"):
        paths.load_vol_data(str(dir))
    paths.save_vol_data(str(dir), {"driverName": "d.example.com", "volumeHandle": "h"})
    assert paths.load_vol_data(str(dir)) == {"driverName": "d.example.com", "volumeHandle": "h"}
    assert sorted(os.listdir(dir)) == ["vol_data.json"]  # no temporary file left
