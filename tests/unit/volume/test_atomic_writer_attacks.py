"""The atomic writer against a volume whose content was planted by someone
else (a container that could write into it, or a node-local user): it must
never read, write or delete outside the volume, and must end with a correct
volume. Each test plants one trap, triggers a rewrite (new payload) or a
restart-style rewrite (a fresh writer with the same payload), and checks
that the victim directory outside the volume is intact."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kubelet.volume.atomic_writer import (
    DATA_DIR,
    NEW_DATA_DIR,
    AtomicWriter,
    FileProjection,
    PayloadError,
    VolumeWriter,
)
from tests.unit.volume.conftest import assert_intact

POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
OLD_TS = "..2020_01_01_00_00_00.123"


def fp(data: str) -> FileProjection:
    return FileProjection(data.encode(), 0o644)


@pytest.fixture
def vol(tmp_path: Path) -> Path:
    d = tmp_path / "pods" / "uid" / "volumes" / "kubernetes.io~configmap" / "v"
    d.mkdir(parents=True)
    return d


def assert_correct(vol: Path, files: dict[str, str]) -> None:
    data = os.readlink(vol / DATA_DIR)
    assert "/" not in data and data.startswith("..20")
    assert (vol / data).is_dir() and not (vol / data).is_symlink()
    for name, text in files.items():
        assert (vol / name).read_text() == text
        top = name.split("/", 1)[0]
        assert os.readlink(vol / top) == f"{DATA_DIR}/{top}"
    hidden = sorted(n for n in os.listdir(vol) if n.startswith(".."))
    assert hidden == sorted([DATA_DIR, data])
    visible = sorted(n for n in os.listdir(vol) if not n.startswith(".."))
    assert visible == sorted({n.split("/", 1)[0] for n in files})


def restart_write(vol: Path, files: dict[str, str]) -> bool:
    """What a restarted kubelet does: a fresh VolumeWriter, no memo."""
    import asyncio

    payload = {k: fp(v) for k, v in files.items()}
    return asyncio.run(VolumeWriter().write(POD, "v", str(vol), payload))


def rewrite(vol: Path, restart: bool) -> dict[str, str]:
    """Trigger the rewrite: the same payload from a fresh writer (a restarted
    kubelet), or a new payload; returns the files the volume must then hold."""
    files = {"a": "1", "d/x": "2"} if restart else {"a": "new"}
    if restart:
        assert restart_write(vol, files)
    else:
        assert AtomicWriter(str(vol)).write({k: fp(v) for k, v in files.items()})
    return files


def first_version(vol: Path) -> str:
    AtomicWriter(str(vol)).write({"a": fp("1"), "d/x": fp("2")})
    return os.readlink(vol / DATA_DIR)


@pytest.mark.parametrize("restart", [False, True], ids=["update", "restart"])
def test_data_link_to_absolute_victim(vol: Path, victim: Path, restart: bool, caplog) -> None:
    first_version(vol)
    os.unlink(vol / DATA_DIR)
    os.symlink(str(victim), vol / DATA_DIR)
    with caplog.at_level(logging.WARNING):
        files = rewrite(vol, restart)
    assert_intact(victim)
    assert_correct(vol, files)
    assert any(DATA_DIR in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("restart", [False, True], ids=["update", "restart"])
def test_data_link_backstepping_to_victim(vol: Path, victim: Path, restart: bool) -> None:
    first_version(vol)
    rel = os.path.relpath(victim, vol)
    assert rel.startswith("../")
    os.unlink(vol / DATA_DIR)
    os.symlink(rel, vol / DATA_DIR)
    files = rewrite(vol, restart)
    assert_intact(victim)
    assert_correct(vol, files)


@pytest.mark.parametrize("restart", [False, True], ids=["update", "restart"])
def test_timestamped_dir_that_is_a_symlink_out(vol: Path, victim: Path, restart: bool) -> None:
    old = first_version(vol)
    import shutil

    shutil.rmtree(vol / old)
    os.symlink(str(victim), vol / OLD_TS)  # looks like one of the writer's own
    os.unlink(vol / DATA_DIR)
    os.symlink(OLD_TS, vol / DATA_DIR)
    files = rewrite(vol, restart)
    assert_intact(victim)
    assert_correct(vol, files)  # the planted link is gone too


def test_data_link_with_a_path_inside_the_volume_is_not_trusted(vol: Path, victim: Path) -> None:
    first_version(vol)
    # One component deeper, through a link out: not one of the writer's own names.
    os.symlink(str(victim), vol / "..2020_01_01_00_00_00.9")
    os.unlink(vol / DATA_DIR)
    os.symlink("..2020_01_01_00_00_00.9/sub", vol / DATA_DIR)
    assert AtomicWriter(str(vol)).write({"a": fp("new")})
    assert_intact(victim)
    assert_correct(vol, {"a": "new"})


def test_subdir_of_current_version_replaced_by_symlink(vol: Path, victim: Path) -> None:
    old = first_version(vol)
    import shutil

    shutil.rmtree(vol / old / "d")
    os.symlink(str(victim), vol / old / "d")
    # Same payload: the planted link makes it differ, and the old version goes
    # without anything being deleted through the link.
    assert AtomicWriter(str(vol)).write({"a": fp("1"), "d/x": fp("2")})
    assert_intact(victim)
    assert_correct(vol, {"a": "1", "d/x": "2"})


def test_file_of_current_version_replaced_by_symlink_is_not_read(vol: Path, victim: Path) -> None:
    old = first_version(vol)
    os.unlink(vol / old / "a")
    os.symlink(str(victim / "a"), vol / old / "a")
    # Had the link been followed, the content would compare equal.
    assert AtomicWriter(str(vol)).write({"a": fp("precious a"), "d/x": fp("2")})
    assert_intact(victim)
    assert_correct(vol, {"a": "precious a", "d/x": "2"})


@pytest.mark.parametrize("target", ["dir", "file"])
def test_user_visible_name_replaced_by_symlink_to_victim(
    vol: Path, victim: Path, target: str
) -> None:
    first_version(vol)
    os.unlink(vol / "a")
    os.symlink(str(victim if target == "dir" else victim / "a"), vol / "a")
    os.unlink(vol / "d")
    os.symlink(str(victim / "sub"), vol / "d")
    assert AtomicWriter(str(vol)).write({"a": fp("new"), "d/x": fp("2")})
    assert_intact(victim)
    assert_correct(vol, {"a": "new", "d/x": "2"})
    # The same with an unchanged payload (only the links are repaired).
    os.unlink(vol / "a")
    os.symlink(str(victim), vol / "a")
    assert not AtomicWriter(str(vol)).write({"a": fp("new"), "d/x": fp("2")})
    assert_intact(victim)
    assert_correct(vol, {"a": "new", "d/x": "2"})


def test_stale_user_visible_name_pointing_out_is_unlinked_not_followed(
    vol: Path, victim: Path
) -> None:
    first_version(vol)
    os.unlink(vol / "d")
    os.symlink(str(victim), vol / "d")
    assert AtomicWriter(str(vol)).write({"a": fp("1")})  # d dropped from the payload
    assert_intact(victim)
    assert_correct(vol, {"a": "1"})


def test_planted_data_dir_and_tmp_link_that_are_real_dirs(vol: Path, victim: Path) -> None:
    first_version(vol)
    os.unlink(vol / DATA_DIR)
    (vol / DATA_DIR).mkdir()
    os.symlink(str(victim), vol / DATA_DIR / "escape")
    (vol / NEW_DATA_DIR).mkdir()
    os.symlink(str(victim), vol / NEW_DATA_DIR / "escape")
    assert AtomicWriter(str(vol)).write({"a": fp("new")})
    assert_intact(victim)
    assert_correct(vol, {"a": "new"})


def test_orphan_looking_dirs_holding_links_out_are_removed_safely(vol: Path, victim: Path) -> None:
    first_version(vol)
    orphan = vol / "..2021_01_01_00_00_00.5"
    orphan.mkdir()
    os.symlink(str(victim), orphan / "link")
    os.symlink(str(victim), vol / "..2021_01_01_00_00_00.6")
    assert AtomicWriter(str(vol)).write({"a": fp("new")})
    assert_intact(victim)
    assert_correct(vol, {"a": "new"})


def test_volume_root_itself_a_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "vol-link"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        AtomicWriter(str(link)).write({"a": fp("x")})
    assert_intact(victim)


def test_nested_mountpoint_under_a_planted_link_is_not_created_outside(
    vol: Path, victim: Path
) -> None:
    import asyncio

    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "volumeMounts": [
                        {"name": "v", "mountPath": "/cfg"},
                        {"name": "o", "mountPath": "/cfg/escape/newdir"},
                    ],
                }
            ]
        },
    }
    os.symlink(str(victim), vol / "escape")
    with pytest.raises(PayloadError, match="unable to create nested volume mountpoints"):
        asyncio.run(VolumeWriter().write(pod, "v", str(vol), {"a": fp("1")}))
    assert not (victim / "newdir").exists()
    assert_intact(victim)
