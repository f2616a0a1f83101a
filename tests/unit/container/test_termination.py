"""Termination messages: file placement, size limits, fallback to logs."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from pathlib import Path

import pytest

from kubelet.kuberuntime.termination import (
    container_status_message,
    create_termination_log_file,
    cri_log_tail_reader,
    pod_message_budget,
    read_termination_message,
    termination_message_host_path,
    truncate_message,
)


def test_create_termination_log_file(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pods" / "uid-1"
    old = os.umask(0o077)
    try:
        first = create_termination_log_file(str(pod_dir), "app")
        second = create_termination_log_file(str(pod_dir), "app")
    finally:
        os.umask(old)
    for path in (first, second):
        assert re.fullmatch(re.escape(str(pod_dir / "containers" / "app")) + r"/[0-9a-f]{8}", path)
        assert os.path.getsize(path) == 0
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
    assert first != second  # one file per container instance


def test_create_termination_log_file_failure_gives_no_mount(tmp_path: Path) -> None:
    (tmp_path / "containers").write_text("a file where the dir should be")
    assert create_termination_log_file(str(tmp_path), "app") == ""


def test_host_path_from_status_mounts() -> None:
    mounts = [
        {"containerPath": "/data", "hostPath": "/var/lib/kubelet/pods/u/volumes/x"},
        {"containerPath": "/dev/termination-log", "hostPath": "/var/lib/kubelet/pods/u/containers/c/1a2b3c4d"},
    ]  # fmt: skip
    assert termination_message_host_path(mounts, "/dev/termination-log").endswith("/1a2b3c4d")
    assert termination_message_host_path(mounts, "/other") == ""
    assert termination_message_host_path(mounts, "") == ""


class Logs:
    def __init__(self, text: str = "log tail") -> None:
        self.text = text
        self.calls: list[tuple[int, int]] = []

    async def __call__(self, lines: int, max_bytes: int) -> str:
        self.calls.append((lines, max_bytes))
        return self.text


@pytest.fixture
def msg_file(tmp_path: Path) -> Path:
    return tmp_path / "msg"


@pytest.mark.parametrize(
    ("content", "policy", "exit_code", "reason", "want", "logs_read"),
    [
        ("DONE", "File", 0, "Completed", "DONE", False),
        ("DONE", "File", 1, "Error", "DONE", False),
        ("", "File", 1, "Error", "", False),
        (None, "File", 1, "Error", "", False),  # no file
        # FallbackToLogsOnError: the logs only when failed and the file is empty or absent.
        ("", "FallbackToLogsOnError", 1, "Error", "log tail", True),
        (None, "FallbackToLogsOnError", 1, "Error", "log tail", True),
        ("", "FallbackToLogsOnError", 0, "Completed", "", False),
        ("OK", "FallbackToLogsOnError", 0, "Completed", "OK", False),
        ("OK", "FallbackToLogsOnError", 2, "Error", "OK", False),
        ("", "FallbackToLogsOnError", 128, "ContainerCannotRun", "", False),
    ],
)
async def test_read_termination_message(
    msg_file: Path,
    content: str | None,
    policy: str,
    exit_code: int,
    reason: str,
    want: str,
    logs_read: bool,
) -> None:
    if content is not None:
        msg_file.write_text(content)
    logs = Logs()
    got = await read_termination_message(
        str(msg_file), policy, exit_code, reason, logs, str(msg_file.parent)
    )
    assert got == want
    assert logs.calls == ([(80, 2048)] if logs_read else [])


async def test_no_mount_falls_back_too() -> None:
    logs = Logs()
    assert (
        await read_termination_message("", "FallbackToLogsOnError", 1, "Error", logs, "/x")
        == "log tail"
    )
    assert await read_termination_message("", "File", 1, "Error", logs, "/x") == ""


async def test_message_file_keeps_its_last_4k(msg_file: Path) -> None:
    msg_file.write_bytes(b"x" * 100 + b"y" * 4096)
    d = str(msg_file.parent)
    got = await read_termination_message(str(msg_file), "File", 0, "", Logs(), d)
    assert got == "y" * 4096
    msg_file.write_bytes(b"z" * 4096)
    assert await read_termination_message(str(msg_file), "File", 0, "", Logs(), d) == "z" * 4096


async def test_unreadable_message_file(tmp_path: Path) -> None:
    directory = tmp_path / "adir"
    directory.mkdir()
    logs = Logs()
    got = await read_termination_message(
        str(directory), "FallbackToLogsOnError", 1, "Error", logs, str(tmp_path)
    )
    assert got == f"Error on reading termination log {directory}: open {directory}: is a directory"
    assert logs.calls == []  # an error is the message; no fallback


def _cri_log(path: Path, lines: list[str]) -> None:
    with path.open("w") as f:
        for i, line in enumerate(lines):
            stream = "stderr" if i % 2 else "stdout"
            f.write(f"2024-01-01T00:00:{i % 60:02d}.000000000Z {stream} F {line}\n")


async def test_cri_log_tail_last_80_lines(tmp_path: Path) -> None:
    log_path = tmp_path / "0.log"
    _cri_log(log_path, [f"line {i}" for i in range(100)])
    got = await cri_log_tail_reader(str(log_path))(80, 2048)
    assert got == "".join(f"line {i}\n" for i in range(20, 100))


async def test_cri_log_tail_last_2k(tmp_path: Path) -> None:
    log_path = tmp_path / "0.log"
    lines = [f"{i:03d}" + "x" * 96 for i in range(50)]  # 101 bytes of output each
    _cri_log(log_path, lines)
    got = await cri_log_tail_reader(str(log_path))(80, 2048)
    whole = "".join(line + "\n" for line in lines)
    assert got == whole[-2048:]
    assert len(got.encode()) == 2048


async def test_cri_log_tail_partial_lines_join(tmp_path: Path) -> None:
    log_path = tmp_path / "0.log"
    log_path.write_text(
        "2024-01-01T00:00:00.000000000Z stdout P DO\n2024-01-01T00:00:00.100000000Z stdout F NE\n"
    )
    assert await cri_log_tail_reader(str(log_path))(80, 2048) == "DONE\n"


async def test_cri_log_tail_missing_log(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    got = await cri_log_tail_reader(str(missing))(80, 2048)
    assert got == (
        f"Error on reading termination message from logs: open {missing}: no such file or directory"
    )


def test_container_status_message() -> None:
    assert container_status_message("", "DONE") == "DONE"
    assert container_status_message("OOMKilled", "DONE") == "OOMKilled: DONE"
    assert container_status_message("runtime says", "") == "runtime says"


def test_pod_budget_and_truncation() -> None:
    assert pod_message_budget({"spec": {}}) == 12288
    assert pod_message_budget({"spec": {"containers": [{}]}}) == 12288
    three = {"spec": {"containers": [{}, {}], "initContainers": [{}]}}
    assert pod_message_budget(three) == 4096
    five = {"spec": {"containers": [{}] * 3, "initContainers": [{}], "ephemeralContainers": [{}]}}
    assert pod_message_budget(five) == 2457
    assert truncate_message("a" * 5000, 4096) == "a" * 4096
    assert truncate_message("short", 4096) == "short"
    # Bytes, not characters: a split character is replaced.
    assert truncate_message("é" * 3, 3) == "é\ufffd"


@pytest.fixture
def container_dir(tmp_path: Path) -> Path:
    """A container's termination-log dir as the kubelet makes it, and a secret beside."""
    (tmp_path / "host-secret").write_text("root:$6$hash")
    return Path(os.path.dirname(create_termination_log_file(str(tmp_path / "pod"), "app")))


async def read_in(container_dir: Path, host_path: str) -> str:
    return await read_termination_message(
        host_path, "FallbackToLogsOnError", 1, "Error", Logs("LOGS"), str(container_dir)
    )


async def test_message_file_replaced_by_a_link_is_not_followed(
    container_dir: Path, tmp_path: Path
) -> None:
    msg = container_dir / "0badf00d"
    msg.symlink_to(tmp_path / "host-secret")
    got = await read_in(container_dir, str(msg))
    assert "root:" not in got
    assert got.startswith(f"Error on reading termination log {msg}: open {msg}: ")


async def test_message_dir_replaced_by_a_link_is_not_followed(
    container_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0badf00d").write_text("from elsewhere")
    import shutil

    shutil.rmtree(container_dir)
    container_dir.symlink_to(elsewhere)
    got = await read_in(container_dir, str(container_dir / "0badf00d"))
    assert "from elsewhere" not in got and got.startswith("Error on reading termination log")


async def test_a_path_outside_the_container_dir_is_never_read(
    container_dir: Path, tmp_path: Path
) -> None:
    # The runtime only echoes the path: one it reports elsewhere is not read.
    for path in (str(tmp_path / "host-secret"), str(container_dir / ".." / "host-secret")):
        got = await read_in(container_dir, path)
        assert "root:" not in got and got.startswith("Error on reading termination log")


async def test_a_fifo_does_not_block_the_kubelet(container_dir: Path) -> None:
    fifo = container_dir / "0badf00d"
    os.mkfifo(fifo)  # a plain open() for reading would wait for a writer forever
    got = await asyncio.wait_for(read_in(container_dir, str(fifo)), 10)
    assert got == (f"Error on reading termination log {fifo}: open {fifo}: not a regular file")


async def test_a_huge_file_costs_at_most_4k(container_dir: Path) -> None:
    big = container_dir / "0badf00d"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse
        f.seek((8 << 30) - 5)
        f.write(b"last!")
    got = await read_in(container_dir, str(big))
    assert len(got) == 4096 and got.endswith("last!")
