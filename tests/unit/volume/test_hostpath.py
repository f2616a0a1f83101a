"""hostPath: every type against real files, with upstream's error texts."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from kubelet.volume import VolumeError
from kubelet.volume.hostpath import HostPathPlugin

POD = {"metadata": {"uid": "u1", "name": "p", "namespace": "default"}, "spec": {}}


async def set_up(path: str | Path, type_: str | None = None):
    src: dict[str, str] = {"path": str(path)}
    if type_ is not None:
        src["type"] = type_
    return await HostPathPlugin().set_up_volume(POD, {"name": "v", "hostPath": src}, "/unused")


async def fails(path: str | Path, type_: str) -> str:
    with pytest.raises(VolumeError) as err:
        await set_up(path, type_)
    return str(err.value)


def test_can_support():
    p = HostPathPlugin()
    assert p.can_support({"name": "v", "hostPath": {"path": "/x"}})
    assert not p.can_support({"name": "v", "emptyDir": {}})


async def test_unset_type_checks_nothing(tmp_path: Path):
    mv = await set_up(tmp_path / "missing")
    assert mv.host_path == str(tmp_path / "missing") and not mv.read_only
    assert not (tmp_path / "missing").exists()
    assert (await set_up(tmp_path / "missing", "")).host_path == str(tmp_path / "missing")


async def test_directory_or_create(tmp_path: Path):
    old = os.umask(0o022)
    try:
        target = tmp_path / "a" / "b"
        await set_up(target, "DirectoryOrCreate")
        assert target.is_dir() and stat.S_IMODE(target.stat().st_mode) == 0o755
        await set_up(target, "DirectoryOrCreate")  # exists: fine
    finally:
        os.umask(old)
    f = tmp_path / "f"
    f.write_text("x")
    assert await fails(f, "DirectoryOrCreate") == (
        f"hostPath type check failed: {f} is not a directory, it's a File"
    )


async def test_directory(tmp_path: Path):
    await set_up(tmp_path, "Directory")
    missing = tmp_path / "nope"
    assert await fails(missing, "Directory") == f"hostPath {missing} doesn't exist"
    f = tmp_path / "f"
    f.write_text("x")
    assert (
        await fails(f, "Directory")
        == f"hostPath type check failed: {f} is not a directory, it's a File"
    )


async def test_file_or_create(tmp_path: Path):
    old = os.umask(0o022)
    try:
        target = tmp_path / "new.txt"
        await set_up(target, "FileOrCreate")
        assert target.is_file() and stat.S_IMODE(target.stat().st_mode) == 0o644
        target.write_text("keep")
        await set_up(target, "FileOrCreate")
        assert target.read_text() == "keep"
    finally:
        os.umask(old)
    assert await fails(tmp_path, "FileOrCreate") == (
        f"hostPath type check failed: {tmp_path} is not a file, it's a Directory"
    )
    # The parent must exist (upstream opens with O_CREATE only).
    msg = await fails(tmp_path / "no" / "file", "FileOrCreate")
    assert msg == f"open {tmp_path / 'no' / 'file'}: no such file or directory"


async def test_file(tmp_path: Path):
    f = tmp_path / "f"
    f.write_text("x")
    await set_up(f, "File")
    link = tmp_path / "link"
    link.symlink_to(f)
    await set_up(link, "File")  # symlinks are followed, as upstream
    assert await fails(tmp_path / "m", "File") == f"hostPath {tmp_path / 'm'} doesn't exist"
    assert await fails(tmp_path, "File") == (
        f"hostPath type check failed: {tmp_path} is not a file, it's a Directory"
    )


async def test_socket(tmp_path: Path):
    path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        await set_up(path, "Socket")
    finally:
        s.close()
    f = tmp_path / "f"
    f.write_text("x")
    assert (
        await fails(f, "Socket")
        == f"hostPath type check failed: {f} is not a socket file, it's a File"
    )


async def test_char_device(tmp_path: Path):
    await set_up("/dev/null", "CharDevice")
    assert await fails(tmp_path, "CharDevice") == (
        f"hostPath type check failed: {tmp_path} is not a character device, it's a Directory"
    )


async def test_block_device():
    assert await fails("/dev/null", "BlockDevice") == (
        "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"
    )
    blocks = [
        f"/dev/{n}" for n in sorted(os.listdir("/dev")) if stat.S_ISBLK(os.stat(f"/dev/{n}").st_mode)
    ] if os.path.isdir("/dev") else []  # fmt: skip
    if not blocks:
        pytest.skip("no block device under /dev here")
    await set_up(blocks[0], "BlockDevice")


async def test_unknown_kind_and_invalid_type(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    msg = await fails(fifo, "File")
    assert msg.startswith(
        f"hostPath type check failed, {fifo} is not a file, unable to determine its type"
    )
    assert await fails(tmp_path, "Bogus") == "Bogus is an invalid volume type"


async def test_backsteps_refused():
    assert await fails("/tmp/../etc", "") == "invalid HostPath `/tmp/../etc`: must not contain '..'"


async def test_tear_down_is_noop(tmp_path: Path):
    f = tmp_path / "f"
    f.write_text("x")
    await HostPathPlugin().tear_down("u1", "v", str(f))
    assert f.exists()
