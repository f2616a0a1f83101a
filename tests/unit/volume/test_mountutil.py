"""Mount-point tests that cost O(1) per volume, and the one-point table search."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kubelet.testing.parts import part_unavailable
from kubelet.util import mountutil
from kubelet.volume import util as volume_util

# mount ID, parent ID, major:minor, root, mount point, options, optional fields, -, type, source
LINE = "{id} 1 0:{id} {root} {point} rw,relatime shared:1 - {fstype} {fstype} rw\n"


def table(tmp_path: Path, *rows: tuple[str, str, str]) -> str:
    path = tmp_path / "mountinfo"
    lines = [LINE.format(id=30 + i, root=r, point=p, fstype=t) for i, (r, p, t) in enumerate(rows)]
    path.write_text("".join(lines))
    return str(path)


def test_fstype_at_finds_the_last_mount_at_that_point(tmp_path: Path) -> None:
    d = tmp_path / "vol"
    d.mkdir()
    mi = table(tmp_path, ("/", "/", "ext4"), ("/", str(d), "tmpfs"), ("/x", str(d), "hugetlbfs"))
    assert mountutil.fstype_at(str(d), mi) == "hugetlbfs"
    assert mountutil.fstype_at(str(tmp_path), mi) is None


def test_fstype_at_reads_the_mount_point_field_not_the_root(tmp_path: Path) -> None:
    d = tmp_path / "vol"
    d.mkdir()
    # A bind mount whose source root is d, mounted elsewhere: d is no mount point.
    mi = table(tmp_path, (str(d), "/elsewhere", "ext4"))
    assert mountutil.fstype_at(str(d), mi) is None


def test_fstype_at_matches_escaped_names(tmp_path: Path) -> None:
    d = tmp_path / "a b\\c"
    d.mkdir()
    escaped = str(d).replace("\\", "\\134").replace(" ", "\\040")
    mi = table(tmp_path, ("/", escaped, "tmpfs"), ("/", str(tmp_path / "a"), "ext4"))
    assert mountutil.fstype_at(str(d), mi) == "tmpfs"
    assert mountutil.fstype_at(str(d), str(tmp_path / "missing")) is None


def test_mount_points_under_are_strictly_below_by_the_point_field(tmp_path: Path) -> None:
    top = "/var/lib/k/pods/u/vol"
    mi = table(
        tmp_path,
        ("/", top, "ext4"),  # at the dir itself: not below it
        ("/", top + "/a\\040b", "tmpfs"),  # escaped space, unescaped in the answer
        ("/", top + "/c/d", "tmpfs"),
        (top + "/e", "/elsewhere", "ext4"),  # the root field names it: not a point below
        ("/", top + "x/f", "ext4"),  # a sibling sharing the prefix
    )
    assert mountutil.mount_points_under(top, mi) == [top + "/a b", top + "/c/d"]
    assert mountutil.mount_points_under(top + "/", mi) == [top + "/a b", top + "/c/d"]
    assert mountutil.mount_points_under(top, str(tmp_path / "missing")) == []


def test_mounted_at_never_follows_the_last_component(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/proc")
    assert mountutil.is_mount_point(str(tmp_path / "link"))  # the path's links are followed
    assert not mountutil.mounted_at(str(tmp_path), "link")  # the entry is the link
    assert mountutil.mounted_at("/", "proc")
    assert not mountutil.mounted_at(str(tmp_path / "absent"), "x")


def test_is_mount_point_without_mounts(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert not mountutil.is_mount_point(str(tmp_path / "d"))
    assert not mountutil.is_mount_point(str(tmp_path / "absent"))
    (tmp_path / "file").write_text("")
    assert not mountutil.is_mount_point(str(tmp_path / "file" / "below"))
    assert mountutil.is_mount_point("/")
    assert mountutil.is_mount_point("/proc")


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        part_unavailable("mount", "mounting needs root")


@pytest.mark.usefixtures("root")
def test_is_mount_point_sees_a_bind_mount_of_the_same_filesystem(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(dst)], check=True)
    try:
        assert os.stat(dst).st_dev == os.stat(tmp_path).st_dev  # st_dev cannot tell
        assert mountutil.is_mount_point(str(dst))
        assert not mountutil.is_mount_point(str(src))
    finally:
        mountutil.umount(str(dst))
    assert not mountutil.is_mount_point(str(dst))


@pytest.mark.usefixtures("root")
def test_unmount_and_remove_unmounts_a_bind_mount_before_removing(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "keep").write_text("the bind source's file")
    subprocess.run(["mount", "--bind", str(src), str(dst)], check=True)
    volume_util.unmount_and_remove(str(dst), "unlinkat")
    assert not dst.exists()
    assert (src / "keep").read_text() == "the bind source's file"


def test_first_set_up_does_not_read_the_mount_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_table(*_: object) -> None:
        raise AssertionError("mount table read for a dir with nothing mounted on it")

    mounts: list[tuple[str, ...]] = []
    monkeypatch.setattr(mountutil, "fstype_at", no_table)
    monkeypatch.setattr(mountutil, "mount_table", no_table)
    monkeypatch.setattr(mountutil, "mount", lambda *a: mounts.append(a))
    d = tmp_path / "v"
    d.mkdir()
    volume_util.ensure_tmpfs(str(d), 0, "volume v")
    assert mounts == [("tmpfs", str(d), "tmpfs", "")]


@pytest.mark.usefixtures("root")
def test_set_up_again_reads_the_table_and_mounts_nothing(tmp_path: Path) -> None:
    d = tmp_path / "v"
    d.mkdir()
    volume_util.ensure_tmpfs(str(d), 1 << 20, "volume v")
    try:
        (d / "f").write_text("kept")
        volume_util.ensure_tmpfs(str(d), 1 << 20, "volume v")
        assert (d / "f").read_text() == "kept"
        assert sum(1 for line in open(mountutil.MOUNTINFO) if f" {d} " in line) == 1
    finally:
        volume_util.unmount_and_remove(str(d), "unlinkat")
    assert not d.exists()
