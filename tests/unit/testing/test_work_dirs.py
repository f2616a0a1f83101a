"""Work directories the harnesses and fixtures leave in /tmp: removed after a
good run, never by a walk into something still mounted under them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benches.node_e2e.__main__ import _remove_workdir
from kubelet.testing.containerd import Containerd
from kubelet.testing.parts import part_unavailable
from kubelet.testing.process import mounts_under, remove_log_links_into, unmount_under


@pytest.fixture
def tmpfs(tmp_path: Path) -> Path:
    """tmp_path/mnt with a tmpfs on it (root only: CI runs the tests as root)."""
    if os.geteuid() != 0:
        part_unavailable("tmpfs", "mounting one needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], check=True)
    (mnt / "precious").write_text("x")
    return mnt


def test_a_passed_runs_workdir_goes(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "images").mkdir(parents=True)
    (work / "images" / "busybox.tar").write_text("layers")
    _remove_workdir(work)
    assert not work.exists()


def test_a_workdir_with_a_mount_under_it_stays(tmp_path: Path, tmpfs: Path) -> None:
    try:
        _remove_workdir(tmp_path)
        assert (tmpfs / "precious").read_text() == "x"
        assert len(mounts_under(tmp_path)) == 1
    finally:
        unmount_under(tmp_path)
    assert mounts_under(tmp_path) == []


def test_containerd_root_goes_but_not_over_a_mount(tmp_path: Path, tmpfs: Path) -> None:
    c = Containerd(str(tmp_path))
    (tmp_path / "root" / "snapshots").mkdir(parents=True)
    (tmp_path / "containerd.log").write_text("log")
    try:
        assert not c.remove_root()
        assert (tmp_path / "root" / "snapshots").is_dir()
    finally:
        unmount_under(tmp_path)
    assert c.remove_root()
    assert not (tmp_path / "root").exists()
    assert (tmp_path / "containerd.log").read_text() == "log"


def test_log_links_into_a_work_dir_go_and_no_others(tmp_path: Path) -> None:
    links, work, other = tmp_path / "containers", tmp_path / "work", tmp_path / "elsewhere"
    for d in (links, work / "logs", other):
        d.mkdir(parents=True)
    (work / "logs" / "0.log").write_text("a test pod's log")
    (links / "mine.log").symlink_to(work / "logs" / "0.log")
    (links / "gone.log").symlink_to(work / "logs" / "deleted.log")
    (links / "theirs.log").symlink_to(other / "0.log")
    (links / "prefix.log").symlink_to(str(work) + "-2/logs/0.log")  # a sibling, not inside
    (links / "file.log").write_text("not a link")
    assert remove_log_links_into(work, str(links)) == 2
    assert sorted(os.listdir(links)) == ["file.log", "prefix.log", "theirs.log"]
    assert (work / "logs" / "0.log").exists()
    assert remove_log_links_into(work, str(tmp_path / "absent")) == 0
