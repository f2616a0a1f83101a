"""kubelet/util/filesystem.py: lookups that never leave a directory, removals
that never follow a link or enter a mount, directories with exact modes."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.testing.parts import part_unavailable
from kubelet.util import filesystem
from kubelet.volumemanager import mountutil
from tests.unit.volume.conftest import assert_intact


@pytest.fixture
def root(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    d = tmp_path / "vol"
    (d / "a" / "b").mkdir(parents=True)
    (d / "a" / "b" / "file").write_text("in")
    fd = filesystem.open_dir(str(d))
    yield d, fd
    os.close(fd)


def resolved(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def test_open_beneath_plain_and_links_that_stay_inside(root: tuple[Path, int]) -> None:
    d, fd = root
    assert resolved(filesystem.open_beneath(fd, "a/b/file")) == str(d / "a" / "b" / "file")
    assert resolved(filesystem.open_beneath(fd, "")) == str(d)
    os.symlink("a/b", d / "ab")
    os.symlink("../a/b/file", d / "a" / "up")  # `..` that stays inside
    os.symlink("b/../b/./file", d / "a" / "dots")
    assert resolved(filesystem.open_beneath(fd, "ab/file")) == str(d / "a" / "b" / "file")
    assert resolved(filesystem.open_beneath(fd, "a/up")) == str(d / "a" / "b" / "file")
    assert resolved(filesystem.open_beneath(fd, "a/dots")) == str(d / "a" / "b" / "file")


@pytest.mark.parametrize(
    "link",
    ["ABS", "../victim", "a/../../victim", "a/b/../../../victim", "a/../.."],
)
def test_open_beneath_refuses_every_way_out(
    root: tuple[Path, int], victim: Path, link: str
) -> None:
    d, fd = root
    os.symlink(str(victim) if link == "ABS" else link, d / "out")
    for rel in ("out", "out/f", "out/sub/g", "a/../out/f"):
        with pytest.raises(OSError) as err:
            os.close(filesystem.open_beneath(fd, rel))
        assert err.value.errno in (errno.EXDEV, errno.ENOENT)
    with pytest.raises(OSError):
        os.close(filesystem.open_beneath(fd, "out/newdir", create_mode=0o755))
    assert not (victim / "newdir").exists()
    assert_intact(victim)


def test_open_beneath_backsteps_in_the_path_itself(root: tuple[Path, int]) -> None:
    _, fd = root
    with pytest.raises(OSError) as err:
        filesystem.open_beneath(fd, "a/../../vol/a")
    assert err.value.errno == errno.EXDEV


def test_open_beneath_link_loop_and_file_as_dir(root: tuple[Path, int]) -> None:
    d, fd = root
    os.symlink("loop2", d / "loop1")
    os.symlink("loop1", d / "loop2")
    with pytest.raises(OSError) as err:
        filesystem.open_beneath(fd, "loop1")
    assert err.value.errno == errno.ELOOP
    with pytest.raises(OSError) as err:
        filesystem.open_beneath(fd, "a/b/file/x")
    assert err.value.errno == errno.ENOTDIR


def test_open_beneath_creates_with_the_mode_whatever_the_umask(root: tuple[Path, int]) -> None:
    d, fd = root
    old = os.umask(0o077)
    try:
        os.close(filesystem.open_beneath(fd, "a/new/deeper", create_mode=0o2775))
    finally:
        os.umask(old)
    assert stat.S_IMODE((d / "a" / "new").stat().st_mode) == 0o2775
    assert stat.S_IMODE((d / "a" / "new" / "deeper").stat().st_mode) == 0o2775


def test_remove_all_at_unlinks_links_never_follows(tmp_path: Path, victim: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "d" / "e").mkdir(parents=True)
    (tree / "d" / "e" / "x").write_text("x")
    os.symlink(str(victim), tree / "abs")
    os.symlink("../victim", tree / "rel")
    os.symlink(str(victim / "sub"), tree / "d" / "e" / "deep")
    os.mkfifo(tree / "fifo")
    fd = filesystem.open_dir(str(tmp_path))
    try:
        filesystem.remove_all_at(fd, "tree")
        filesystem.remove_all_at(fd, "tree")  # missing: nothing to do
    finally:
        os.close(fd)
    assert not tree.exists()
    assert_intact(victim)


def _bind(src: Path, dst: Path) -> bool:
    try:
        mountutil.mount(str(src), str(dst), "", flags=4096)  # MS_BIND
    except OSError:
        return False
    return True


def test_remove_all_at_stops_at_a_bind_mount_of_the_same_filesystem(
    tmp_path: Path, victim: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "mnt").mkdir(parents=True)
    (tree / "a" / "before").write_text("x")
    if not _bind(victim, tree / "a" / "mnt"):
        part_unavailable("bind mounts", "this test needs CAP_SYS_ADMIN (the kubelet runs with it)")
    try:
        # Same st_dev on both sides: only the mount id tells them apart.
        assert (tree / "a" / "mnt").stat().st_dev == victim.stat().st_dev
        fd = filesystem.open_dir(str(tmp_path))
        try:
            with pytest.raises(OSError) as err:
                filesystem.remove_all_at(fd, "tree")
            assert err.value.errno == errno.EBUSY
        finally:
            os.close(fd)
        assert_intact(victim)
        # The same through the volume manager's removal of a pod or volume dir.
        with pytest.raises(OSError):
            mountutil.remove_all_one_filesystem(str(tree))
        assert_intact(victim)
    finally:
        mountutil.umount(str(tree / "a" / "mnt"))
    mountutil.remove_all_one_filesystem(str(tree))
    assert not tree.exists()
    assert_intact(victim)


def test_remove_all_at_a_very_deep_tree_holds_few_descriptors(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    fd = filesystem.open_dir(str(tree))
    cur = os.dup(fd)
    for _ in range(3000):  # deeper than PATH_MAX lets anyone name by path
        os.mkdir("d", dir_fd=cur)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
        os.close(cur)
        cur = nxt
    os.close(cur)
    os.close(fd)
    before = len(os.listdir("/proc/self/fd"))
    parent = filesystem.open_dir(str(tmp_path))
    try:
        filesystem.remove_all_at(parent, "tree")
    finally:
        os.close(parent)
    assert not tree.exists()
    assert len(os.listdir("/proc/self/fd")) == before


def test_mkdir_all_gives_every_new_dir_the_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        filesystem.mkdir_all(str(tmp_path / "a" / "b" / "c"), 0o750)
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o750
    os.chmod(tmp_path / "a", 0o700)
    filesystem.mkdir_all(str(tmp_path / "a" / "b"), 0o750)  # existing ones keep theirs
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_fs_group_walk_never_changes_what_a_swapped_in_link_points_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container swaps a file of its volume for a link to a host file just
    as the kubelet changes the file's mode: the host file keeps its mode."""
    from kubelet.volume import ownership

    vol = tmp_path / "vol"
    (vol / "sub").mkdir(parents=True)
    (vol / "sub" / "f").write_text("mine")
    (vol / "sub" / "f").chmod(0o600)
    host = tmp_path / "host-file"
    host.write_text("host")
    host.chmod(0o600)
    real_chmod = os.chmod
    swapped: list[str] = []

    def swap_then_chmod(path: Any, mode: int, **kw: Any) -> None:
        target = vol / "sub" / "f"
        # The chmod meant for sub/f (by name, or by a descriptor's /proc path).
        if not swapped and os.path.realpath(str(path)) == str(target):
            target.rename(vol / "sub" / "f.moved")
            target.symlink_to(host)
            swapped.append(str(path))
        real_chmod(path, mode, **kw)

    monkeypatch.setattr(os, "chmod", swap_then_chmod)
    ownership.set_volume_ownership(str(vol), os.getgid())
    assert swapped  # the race was run
    assert stat.S_IMODE(host.stat().st_mode) == 0o600
    assert stat.S_IMODE((vol / "sub" / "f.moved").stat().st_mode) == 0o660


def test_walk_never_enters_a_link_even_one_swapped_in_mid_walk(
    tmp_path: Path, victim: Path
) -> None:
    vol = tmp_path / "vol"
    (vol / "a" / "sub").mkdir(parents=True)
    (vol / "a" / "sub" / "x").write_text("x")
    (vol / "link").symlink_to(victim)
    fd = filesystem.open_dir(str(vol))
    seen = []
    try:
        for _, name, _st in filesystem.walk(fd):
            seen.append(name)
            if name == "sub":
                # Listed as a directory; swapped for a link before the walk enters it.
                (vol / "a" / "sub").rename(vol / "a" / "moved")
                (vol / "a" / "sub").symlink_to(victim)
    finally:
        os.close(fd)
    assert sorted(seen) == ["a", "link", "sub"]  # nothing of the victim's
    from kubelet.stats.volumes import du

    _, inodes = du(str(vol))
    assert inodes == 6  # vol, a, moved, moved/x, a/sub (link), link
