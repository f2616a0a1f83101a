"""Container log rotation on the CRI fake with real files and a fake clock."""

from __future__ import annotations

import asyncio
import gzip
import os
import time
from pathlib import Path

import pytest

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime.logs import LogOptions, read_logs
from kubelet.logs.container_log_manager import (
    ContainerLogManager,
    LogRotatePolicy,
    parse_max_size,
)

from .fakes import Clock, ReopeningRuntime, add_container, add_sandbox, touch

T0 = 1_750_000_000.0


def stamp(t: float) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(t))


class Node:
    def __init__(self, tmp: Path, max_size: int = 100, max_files: int = 5, workers: int = 1):
        self.rt = ReopeningRuntime()
        self.tmp = tmp
        self.clock = Clock(T0)
        self.m = ContainerLogManager(
            self.rt,
            LogRotatePolicy(max_size=max_size, max_files=max_files),
            max_workers=workers,
            clock=self.clock,
        )
        self.sid = ""

    async def container(self, name: str = "c", state: int = pb.CONTAINER_RUNNING) -> str:
        if not self.sid:
            self.sid = await add_sandbox(self.rt, "u1", 0)
        path = str(self.tmp / name / "0.log")
        touch(path, 0)
        return await add_container(self.rt, self.sid, name, 0, state=state, log_path=path)

    def log(self, name: str = "c") -> Path:
        return self.tmp / name / "0.log"

    def files(self, name: str = "c") -> list[str]:
        return sorted(os.listdir(self.tmp / name))

    async def write_and_rotate(self, data: bytes, name: str = "c") -> list[str]:
        with open(self.log(name), "ab") as fh:
            fh.write(data)
        self.clock.now += 1
        return await self.m.rotate_logs()


async def test_a_log_under_the_max_size_is_left_alone(tmp_path: Path) -> None:
    n = Node(tmp_path)
    await n.container()
    assert await n.write_and_rotate(b"x" * 99) == []
    assert n.files() == ["0.log"]
    assert n.rt.called("reopen_container_log") == []


async def test_rotation_renames_with_the_upstream_timestamp_and_reopens(tmp_path: Path) -> None:
    n = Node(tmp_path)
    cid = await n.container()
    assert await n.write_and_rotate(b"a" * 100) == [cid]  # at the max size: rotated
    assert n.files() == ["0.log", f"0.log.{stamp(T0 + 1)}"]
    assert n.log().read_bytes() == b""
    assert (tmp_path / "c" / f"0.log.{stamp(T0 + 1)}").read_bytes() == b"a" * 100
    assert n.rt.called("reopen_container_log") == [(cid,)]


async def test_older_rotations_are_gzipped_and_at_most_max_files_kept(tmp_path: Path) -> None:
    n = Node(tmp_path, max_files=4)
    await n.container()
    for i in range(6):
        await n.write_and_rotate(bytes([65 + i]) * 150)
    t = [stamp(T0 + i) for i in range(1, 7)]
    # 4 files: the live log, the newest rotation plain, two older ones gzipped.
    assert n.files() == ["0.log", f"0.log.{t[3]}.gz", f"0.log.{t[4]}.gz", f"0.log.{t[5]}"]
    d = tmp_path / "c"
    assert gzip.decompress((d / f"0.log.{t[3]}.gz").read_bytes()) == b"D" * 150
    assert gzip.decompress((d / f"0.log.{t[4]}.gz").read_bytes()) == b"E" * 150
    assert (d / f"0.log.{t[5]}").read_bytes() == b"F" * 150


async def test_max_files_two_keeps_one_rotation(tmp_path: Path) -> None:
    n = Node(tmp_path, max_files=2)
    await n.container()
    for _ in range(3):
        await n.write_and_rotate(b"x" * 200)
    assert n.files() == ["0.log", f"0.log.{stamp(T0 + 3)}"]


async def test_a_failed_reopen_puts_the_log_back(tmp_path: Path) -> None:
    n = Node(tmp_path)
    cid = await n.container()
    n.rt.inject_error("reopen_container_log", errors.CRIError("ReopenContainerLog", "no"))
    assert await n.write_and_rotate(b"x" * 200) == []
    assert n.files() == ["0.log"] and n.log().read_bytes() == b"x" * 200
    assert await n.write_and_rotate(b"y") == [cid]  # the next round rotates it
    assert n.files() == ["0.log", f"0.log.{stamp(T0 + 2)}"]


async def test_a_vanished_log_is_reopened(tmp_path: Path) -> None:
    n = Node(tmp_path, max_size=0)
    cid = await n.container()
    n.log().unlink()
    # Reopened (empty, but max size 0 makes even that due): reopen, then rotation.
    assert await n.m.rotate_logs() == [cid]
    assert n.rt.called("reopen_container_log") == [(cid,), (cid,)]
    n2 = Node(tmp_path / "b")
    await n2.container()
    n2.log().unlink()
    assert await n2.m.rotate_logs() == []
    assert n2.files() == ["0.log"]  # reopened, and small


async def test_leftovers_of_an_interrupted_rotation_are_cleaned(tmp_path: Path) -> None:
    n = Node(tmp_path)
    await n.container()
    d = tmp_path / "c"
    for name in ("0.log.20250101-000000.gz.tmp", "0.log.20250101-000001", "0.log.20250101-000002"):
        (d / name).write_bytes(b"old")
    (d / "0.log.20250101-000001.gz").write_bytes(gzip.compress(b"old"))
    await n.write_and_rotate(b"x" * 100)
    assert n.files() == [
        "0.log",
        "0.log.20250101-000001.gz",  # its plain twin was a finished compression
        "0.log.20250101-000002.gz",
        f"0.log.{stamp(T0 + 1)}",
    ]


async def test_only_running_containers_and_paths_asked_once(tmp_path: Path) -> None:
    n = Node(tmp_path)
    run = await n.container("a")
    await n.container("b", state=pb.CONTAINER_EXITED)
    with open(n.log("b"), "wb") as fh:
        fh.write(b"x" * 500)
    assert await n.write_and_rotate(b"x" * 100, "a") == [run]
    assert await n.write_and_rotate(b"x" * 100, "a") == [run]
    assert n.rt.called("container_status") == [(run,)]
    # IDs come from the raw response: no Container message built per container.
    assert len(n.rt.called("list_containers_raw")) == 2 and n.rt.called("list_containers") == []
    assert n.files("b") == ["0.log"]
    del n.rt.containers[run]
    await n.m.rotate_logs()
    assert n.m._paths == {}


async def test_rotations_run_max_workers_at_a_time(tmp_path: Path) -> None:
    n = Node(tmp_path, workers=2)
    now = [0, 0]  # in flight, most seen

    class Slow(ReopeningRuntime):
        async def reopen_container_log(self, container_id: str) -> None:
            now[0] += 1
            now[1] = max(now[1], now[0])
            await asyncio.sleep(0.01)
            await super().reopen_container_log(container_id)
            now[0] -= 1

    n.rt.__class__ = Slow
    names = [f"c{i}" for i in range(5)]
    ids = [await n.container(name) for name in names]
    for name in names:
        touch(str(n.log(name)), 100)
    assert sorted(await n.m.rotate_logs()) == sorted(ids)
    assert now[1] == 2


async def test_clean_removes_every_log_of_a_container(tmp_path: Path) -> None:
    n = Node(tmp_path)
    cid = await n.container()
    await n.write_and_rotate(b"x" * 100)
    await n.write_and_rotate(b"x" * 100)
    await n.m.clean(cid)
    assert n.files() == []


async def test_disabled_with_a_negative_max_size_and_policy_checks(tmp_path: Path) -> None:
    n = Node(tmp_path, max_size=-1)
    await n.container()
    assert not n.m.enabled
    assert await n.write_and_rotate(b"x" * 1000) == []
    assert n.rt.calls == []
    with pytest.raises(ValueError, match="invalid MaxFiles 1, must be > 1"):
        LogRotatePolicy(max_files=1)
    assert parse_max_size("10Mi") == 10 * 1024 * 1024
    assert parse_max_size("1k") == 1000
    with pytest.raises(ValueError, match="failed to parse container log max size"):
        parse_max_size("ten")


async def test_run_rotates_every_interval_until_stopped(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.m.monitor_interval = 0.01
    cid = await n.container()
    stop = asyncio.Event()
    task = asyncio.create_task(n.m.run(stop))
    for i in range(3):
        with open(n.log(), "ab") as fh:
            fh.write(b"x" * 100)
        n.clock.now += 1
        for _ in range(200):
            if len(n.rt.called("reopen_container_log")) > i:
                break
            await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert n.rt.called("reopen_container_log") == [(cid,)] * 3
    assert len(n.files()) == 4


def cri(i: int) -> bytes:
    return f"2025-01-01T00:00:{i:02d}.000000000Z stdout F line {i}\n".encode()


async def test_a_following_reader_keeps_reading_across_rotation(tmp_path: Path) -> None:
    """kuberuntime/logs.read_logs (follow) against this manager's rotation."""
    n = Node(tmp_path, max_size=1)
    await n.container()
    out: list[bytes] = []
    done = asyncio.Event()

    async def write(b: bytes) -> None:
        out.append(b)

    async def running() -> bool:
        return not done.is_set()

    reader = asyncio.create_task(read_logs(str(n.log()), LogOptions(follow=True), write, running))
    for i in range(6):
        with open(n.log(), "ab") as fh:
            fh.write(cri(i))
        await asyncio.sleep(0.15)  # the reader polls every 0.1 s
        if i % 2 == 1:
            n.clock.now += 1
            await n.m.rotate_logs()
    await asyncio.sleep(0.15)
    done.set()
    await asyncio.wait_for(reader, 5)
    assert b"".join(out) == b"".join(f"line {i}\n".encode() for i in range(6))


def test_from_config_reads_the_kubelet_configuration() -> None:
    from kubelet.apis.config import KubeletConfiguration

    cfg = KubeletConfiguration()
    cfg.container_log_max_size = "1Mi"
    cfg.container_log_max_files = 3
    cfg.container_log_max_workers = 4
    cfg.container_log_monitor_interval = 5.0
    m = ContainerLogManager.from_config(cfg, ReopeningRuntime())
    assert (m.policy.max_size, m.policy.max_files, m.max_workers, m.monitor_interval) == (
        1 << 20,
        3,
        4,
        5.0,
    )


async def test_a_second_rotation_within_the_same_second_waits(tmp_path: Path) -> None:
    n = Node(tmp_path)
    cid = await n.container()
    assert await n.write_and_rotate(b"a" * 100) == [cid]
    with open(n.log(), "ab") as fh:
        fh.write(b"b" * 100)
    assert await n.m.rotate_logs() == []  # the clock has not moved: same stamp
    assert n.files() == ["0.log", f"0.log.{stamp(T0 + 1)}"]
    n.clock.now += 1
    assert await n.m.rotate_logs() == [cid]
    d = tmp_path / "c"
    assert gzip.decompress((d / f"0.log.{stamp(T0 + 1)}.gz").read_bytes()) == b"a" * 100
