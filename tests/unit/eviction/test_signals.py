"""The eviction signals read from fake cgroup, /proc and filesystem trees (tmp
dirs), through the project's stats parsers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubelet import stats
from kubelet.cri.api import api_pb2 as pb
from kubelet.eviction import signals
from kubelet.eviction.signals import (
    DiskLayout,
    NodeSignals,
    Observation,
    disk_layout,
    fs_observations,
    memory_observations,
    pid_observation,
)

GiB, MiB = 2**30, 2**20


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def meminfo(tmp: Path, total: int, available: int) -> str:
    p = tmp / "meminfo"
    write(p, f"MemTotal:       {total // 1024} kB\nMemFree:  1 kB\n"
             f"MemAvailable:   {available // 1024} kB\n")  # fmt: skip
    return str(p)


def v1_memory(root: Path, rel: str, usage: int, inactive: int, limit: int | None = None) -> None:
    d = root / "memory" / rel
    write(d / "memory.usage_in_bytes", f"{usage}\n")
    # The hierarchy's totals (total_*) are what counts, not the cgroup's own pages.
    write(d / "memory.stat", f"cache 1\ninactive_file 7\ntotal_cache {inactive}\n"
                             f"total_inactive_file {inactive}\n")  # fmt: skip
    write(d / "memory.limit_in_bytes", f"{limit if limit is not None else 2**63 - 4096}\n")


def test_memory_available_is_capacity_less_the_root_working_set_v1(tmp_path: Path) -> None:
    # MemAvailable (20 GiB) would say otherwise: the root cgroup's working set rules.
    mi = meminfo(tmp_path, 24 * GiB, 20 * GiB)
    v1_memory(tmp_path, "", usage=10 * GiB, inactive=3 * GiB)
    problems: list[str] = []
    out = memory_observations(1, str(tmp_path), None, mi, problems)
    assert out == {signals.MEMORY: Observation(24 * GiB - 7 * GiB, 24 * GiB)}
    assert problems == []


def test_memory_available_v2_root_is_anon_plus_file_less_inactive_file(tmp_path: Path) -> None:
    # The v2 root cgroup has no memory.current: its usage is anon + file.
    mi = meminfo(tmp_path, 8 * GiB, 7 * GiB)
    write(tmp_path / "memory.stat", f"anon {3 * GiB}\nfile {2 * GiB}\ninactive_file {GiB}\n")
    out = memory_observations(2, str(tmp_path), None, mi, [])
    assert out[signals.MEMORY] == Observation(4 * GiB, 8 * GiB)


def test_allocatable_memory_v2_uses_memory_current_and_max(tmp_path: Path) -> None:
    mi = meminfo(tmp_path, 8 * GiB, 7 * GiB)
    write(tmp_path / "memory.stat", "anon 1\nfile 1\n")
    pods = tmp_path / "kubepods"
    write(pods / "memory.current", f"{5 * GiB}\n")
    write(pods / "memory.max", f"{6 * GiB}\n")
    write(pods / "memory.stat", f"anon 1\nfile 9\ninactive_file {GiB}\n")
    out = memory_observations(2, str(tmp_path), "kubepods", mi, [])
    assert out[signals.ALLOCATABLE_MEMORY] == Observation(2 * GiB, 6 * GiB)


def test_memory_available_never_negative(tmp_path: Path) -> None:
    mi = meminfo(tmp_path, 1 * GiB, 0)
    v1_memory(tmp_path, "", usage=3 * GiB, inactive=0)
    out = memory_observations(1, str(tmp_path), None, mi, [])
    assert out[signals.MEMORY] == Observation(0, GiB)


def test_allocatable_memory_is_the_kubepods_limit_less_its_working_set(tmp_path: Path) -> None:
    mi = meminfo(tmp_path, 24 * GiB, 20 * GiB)
    v1_memory(tmp_path, "", usage=10 * GiB, inactive=GiB)
    v1_memory(tmp_path, "kubepods", usage=6 * GiB, inactive=GiB, limit=20 * GiB)
    out = memory_observations(1, str(tmp_path), "kubepods", mi, [])
    assert out[signals.ALLOCATABLE_MEMORY] == Observation(15 * GiB, 20 * GiB)
    assert out[signals.MEMORY] == Observation(15 * GiB, 24 * GiB)
    # The memcg notifier's level adds back what usage counts and the working set not.
    assert out[signals.MEMORY].reclaimable == out[signals.ALLOCATABLE_MEMORY].reclaimable == GiB


def test_allocatable_memory_without_a_kubepods_limit_is_unobserved_and_said(
    tmp_path: Path,
) -> None:
    mi = meminfo(tmp_path, 24 * GiB, 20 * GiB)
    v1_memory(tmp_path, "", usage=10 * GiB, inactive=GiB)
    v1_memory(tmp_path, "kubepods", usage=6 * GiB, inactive=GiB)  # unlimited
    problems: list[str] = []
    out = memory_observations(1, str(tmp_path), "kubepods", mi, problems)
    assert signals.ALLOCATABLE_MEMORY not in out
    assert any(signals.ALLOCATABLE_MEMORY in p for p in problems)


def test_memory_unreadable_is_unobserved_and_said(tmp_path: Path) -> None:
    problems: list[str] = []
    out = memory_observations(1, str(tmp_path), None, str(tmp_path / "none"), problems)
    assert out == {} and any(signals.MEMORY in p for p in problems)


def proc(tmp: Path, pid_max: int | None, threads_max: int | None, tasks: int) -> str:
    if pid_max is not None:
        write(tmp / "sys/kernel/pid_max", f"{pid_max}\n")
    if threads_max is not None:
        write(tmp / "sys/kernel/threads-max", f"{threads_max}\n")
    write(tmp / "loadavg", f"0.50 0.40 0.30 3/{tasks} 12345\n")
    return str(tmp)


def test_pid_available_is_the_lower_task_limit_less_every_task(tmp_path: Path) -> None:
    # threads-max below pid_max: the kernel stops at threads-max.
    got = pid_observation(proc(tmp_path, 4_194_304, 100_000, 2_500), [])
    assert got == Observation(97_500, 100_000)


def test_pid_available_with_only_pid_max(tmp_path: Path) -> None:
    got = pid_observation(proc(tmp_path, 32_768, None, 768), [])
    assert got == Observation(32_000, 32_768)


def test_pid_available_without_limits_is_unobserved_and_said(tmp_path: Path) -> None:
    problems: list[str] = []
    assert pid_observation(proc(tmp_path, None, None, 10), problems) is None
    assert any(signals.PID in p for p in problems)


def fs_info(image: str, container: str | None = None) -> pb.ImageFsInfoResponse:
    def usage(mount: str) -> pb.FilesystemUsage:
        return pb.FilesystemUsage(fs_id=pb.FilesystemIdentifier(mountpoint=mount))

    return pb.ImageFsInfoResponse(
        image_filesystems=[usage(image)],
        container_filesystems=[usage(container)] if container else [],
    )


DEVICES = {"/var/lib/kubelet": 1, "/var/lib/containerd": 1, "/images": 2, "/containers": 3}


def test_layout_one_filesystem() -> None:
    got = disk_layout("/var/lib/kubelet", fs_info("/var/lib/containerd", "/var/lib/containerd"),
                      True, DEVICES.get)  # fmt: skip
    assert got == DiskLayout("/var/lib/kubelet", "/var/lib/containerd", None, False, False)


def test_layout_dedicated_image_fs() -> None:
    got = disk_layout("/var/lib/kubelet", fs_info("/images", "/images"), True, DEVICES.get)
    assert (got.imagefs, got.containerfs, got.dedicated_image_fs, got.split) == (
        "/images", None, True, False)  # fmt: skip


def test_layout_split_needs_the_gate() -> None:
    info = fs_info("/images", "/containers")
    on = disk_layout("/var/lib/kubelet", info, True, DEVICES.get)
    assert (on.containerfs, on.dedicated_image_fs, on.split) == ("/containers", True, True)
    # Gate off: no split filesystem; containerfs reads the image filesystem.
    off = disk_layout("/var/lib/kubelet", info, False, DEVICES.get)
    assert (off.containerfs, off.dedicated_image_fs, off.split) == (None, True, False)


def test_layout_containers_on_the_root_fs_images_apart_is_split() -> None:
    # Images alone on their disk, containers' layers on the kubelet's filesystem.
    info = fs_info("/images", "/var/lib/containerd")
    got = disk_layout("/var/lib/kubelet", info, True, DEVICES.get)
    assert (got.dedicated_image_fs, got.split) == (True, True)


def test_layout_without_an_image_filesystem() -> None:
    got = disk_layout("/var/lib/kubelet", pb.ImageFsInfoResponse(), True, DEVICES.get)
    assert got.imagefs is None and not got.dedicated_image_fs


FS = {
    "/kubelet": {"available": 10, "capacity": 100, "inodes_free": 5, "inodes": 50},
    "/images": {"available": 20, "capacity": 200, "inodes_free": 6, "inodes": 60},
    "/containers": {"available": 30, "capacity": 300, "inodes_free": 7, "inodes": 70},
}


@pytest.fixture
def fake_fs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "fs_usage", FS.get)


@pytest.mark.usefixtures("fake_fs")
def test_fs_observations_each_filesystem_apart() -> None:
    out = fs_observations(DiskLayout("/kubelet", "/images", "/containers", True, True), [])
    assert out == {
        signals.NODEFS: Observation(10, 100),
        signals.NODEFS_INODES: Observation(5, 50),
        signals.IMAGEFS: Observation(20, 200),
        signals.IMAGEFS_INODES: Observation(6, 60),
        signals.CONTAINERFS: Observation(30, 300),
        signals.CONTAINERFS_INODES: Observation(7, 70),
    }


@pytest.mark.usefixtures("fake_fs")
def test_fs_observations_containerfs_is_imagefs_unless_split() -> None:
    out = fs_observations(DiskLayout("/kubelet", "/images", None, True, False), [])
    assert out[signals.CONTAINERFS] == Observation(20, 200)
    assert out[signals.CONTAINERFS_INODES] == Observation(6, 60)


@pytest.mark.usefixtures("fake_fs")
def test_fs_observations_without_imagefs() -> None:
    problems: list[str] = []
    out = fs_observations(DiskLayout("/kubelet", None, None, False, False), problems)
    assert set(out) == {signals.NODEFS, signals.NODEFS_INODES}
    assert any(signals.IMAGEFS in p for p in problems)


def test_fs_observations_are_statvfs_of_the_paths(tmp_path: Path) -> None:
    out = fs_observations(DiskLayout(str(tmp_path), str(tmp_path), None, False, False), [])
    st = os.statvfs(tmp_path)
    assert out[signals.NODEFS].capacity == st.f_blocks * st.f_frsize
    assert out[signals.NODEFS_INODES].capacity == st.f_files
    assert out[signals.IMAGEFS] == out[signals.NODEFS]


async def test_node_signals_learn_the_layout_once_then_observe_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    images = tmp_path / "images"
    images.mkdir()

    async def image_fs_info() -> pb.ImageFsInfoResponse:
        calls.append(1)
        return fs_info(str(images), str(images))

    meminfo(tmp_path, 8 * GiB, 0)
    v1_memory(tmp_path / "cg", "", usage=3 * GiB, inactive=GiB)
    proc(tmp_path, 1000, 2000, 10)
    ns = NodeSignals(
        str(tmp_path), 1, str(tmp_path / "cg"), None, image_fs_info, proc=str(tmp_path)
    )
    before = ns.observe()  # the runtime not asked yet: imagefs unobserved (and said)
    assert signals.IMAGEFS not in before and signals.NODEFS in before
    assert "imagefs.available and imagefs.inodesFree unobserved" in caplog.text
    layout = await ns.layout()
    assert layout is not None and layout.imagefs == str(images)
    assert await ns.layout() is layout and calls == [1]
    out = ns.observe()
    assert out[signals.MEMORY] == Observation(6 * GiB, 8 * GiB)
    assert out[signals.PID] == Observation(990, 1000)
    assert out[signals.IMAGEFS] == out[signals.CONTAINERFS]
    assert set(out) >= {signals.NODEFS_INODES, signals.IMAGEFS_INODES}
