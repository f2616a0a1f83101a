"""The atomic writer: layout, updates, validation, ownership, and readers that
never see a mixed or half-written set."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from kubelet.volume.atomic_writer import (
    DATA_DIR,
    AtomicWriter,
    FileProjection,
    PayloadError,
    VolumeWriter,
    validate_path,
)


def fp(data: str, mode: int = 0o644) -> FileProjection:
    return FileProjection(data.encode(), mode)


def read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def ts_dirs(target: str) -> list[str]:
    return sorted(n for n in os.listdir(target) if n.startswith("..") and n != DATA_DIR)


def test_layout_symlinks_through_data(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    assert w.write({"a": fp("1"), "dir/b": fp("2"), "dir/sub/c": fp("3", 0o600)})
    data = os.readlink(os.path.join(target, DATA_DIR))
    assert data.startswith("..") and "/" not in data
    assert os.readlink(os.path.join(target, "a")) == "..data/a"
    assert os.readlink(os.path.join(target, "dir")) == "..data/dir"
    assert read(os.path.join(target, "dir/sub/c")) == "3"
    assert stat.S_IMODE(os.stat(os.path.join(target, "a")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.join(target, "dir/sub/c")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(target, data)).st_mode) == 0o755
    assert ts_dirs(target) == [data]


def test_modes_do_not_depend_on_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        AtomicWriter(str(tmp_path)).write({"a": fp("x", 0o666), "b": fp("y", 0o400)})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o666
    assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o400


def test_update_swaps_and_removes_old_version_and_stale_names(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    w.write({"a": fp("1"), "gone": fp("x"), "d/keep": fp("k"), "d/drop": fp("z")})
    first = os.readlink(os.path.join(target, DATA_DIR))
    assert w.write({"a": fp("2"), "d/keep": fp("k"), "new": fp("n")})
    second = os.readlink(os.path.join(target, DATA_DIR))
    assert second != first
    assert ts_dirs(target) == [second]
    assert read(os.path.join(target, "a")) == "2"
    assert read(os.path.join(target, "new")) == "n"
    assert not os.path.lexists(os.path.join(target, "gone"))
    assert not os.path.exists(os.path.join(target, "d/drop"))
    assert sorted(os.listdir(target)) == sorted(["..data", second, "a", "d", "new"])


def test_unchanged_payload_is_not_rewritten(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    assert w.write({"a": fp("1"), "b/c": fp("2")})
    data = os.readlink(os.path.join(target, DATA_DIR))
    mtime = os.stat(os.path.join(target, "a")).st_mtime_ns
    assert not w.write({"a": fp("1"), "b/c": fp("2")})
    assert os.readlink(os.path.join(target, DATA_DIR)) == data
    assert os.stat(os.path.join(target, "a")).st_mtime_ns == mtime
    # A dropped key alone is a change too.
    assert w.write({"a": fp("1")})
    assert not os.path.lexists(os.path.join(target, "b"))


def test_missing_user_visible_link_is_repaired_without_rewrite(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    w.write({"a": fp("1")})
    data = os.readlink(os.path.join(target, DATA_DIR))
    os.unlink(os.path.join(target, "a"))
    assert not w.write({"a": fp("1")})
    assert read(os.path.join(target, "a")) == "1"
    assert os.readlink(os.path.join(target, DATA_DIR)) == data


def test_empty_payload(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    assert w.write({})
    assert os.path.isdir(os.path.join(target, DATA_DIR))
    assert not w.write({})
    w.write({"a": fp("1")})
    assert w.write({})
    assert sorted(os.listdir(target)) == sorted(["..data", *ts_dirs(target)])


def test_orphan_version_from_a_crash_is_removed(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    w.write({"a": fp("1")})
    os.mkdir(os.path.join(target, "..2020_01_01_00_00_00.123"))
    os.symlink("..nothing", os.path.join(target, "..data_tmp"))
    w.write({"a": fp("2")})
    assert ts_dirs(target) == [os.readlink(os.path.join(target, DATA_DIR))]
    assert not os.path.lexists(os.path.join(target, "..data_tmp"))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "must not be empty"),
        ("/etc/passwd", "must be relative path"),
        ("../escape", "must not contain '..'"),
        ("a/../../b", "must not contain '..'"),
        ("a/..", "must not contain '..'"),
        ("..data", "must not start with '..'"),
        ("..foo/bar", "must not start with '..'"),
        ("x" * 256, "filenames must be less than or equal to 255 characters"),
        ("a/" * 2049, "must be less than or equal to 4096 characters"),
    ],
)
def test_invalid_paths(path: str, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("(", r"\(")):
        validate_path(path)


@pytest.mark.parametrize("path", ["a", "a/b", "a..b", ".dot", "x/..y", "key.with-dashes_1"])
def test_valid_paths(path: str) -> None:
    validate_path(path)


def test_invalid_payload_writes_nothing(tmp_path: Path) -> None:
    target = str(tmp_path)
    w = AtomicWriter(target)
    w.write({"a": fp("1")})
    before = sorted(os.listdir(target))
    with pytest.raises(PayloadError):
        w.write({"a": fp("2"), "../x": fp("bad")})
    assert sorted(os.listdir(target)) == before
    assert read(os.path.join(target, "a")) == "1"


def test_missing_target_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        AtomicWriter(str(tmp_path / "nope")).write({"a": fp("1")})


def test_fs_group_and_fs_user(tmp_path: Path) -> None:
    gid = os.getgid()
    target = str(tmp_path)
    AtomicWriter(target).write(
        {"tok": FileProjection(b"t", 0o600, fs_user=os.getuid()), "d/f": fp("x", 0o400)},
        fs_group=gid,
    )
    tok = os.stat(os.path.join(target, "tok"))
    assert stat.S_IMODE(tok.st_mode) == 0o640  # 0600 + group read, as upstream
    assert tok.st_gid == gid and tok.st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(os.path.join(target, "d/f")).st_mode) == 0o440
    d = os.stat(os.path.join(target, "d"))
    assert d.st_mode & stat.S_ISGID and stat.S_IMODE(d.st_mode) & 0o550 == 0o550
    assert os.stat(target).st_mode & stat.S_ISGID


def test_reader_never_sees_a_mixed_or_partial_set(tmp_path: Path) -> None:
    """A reader that resolves ..data once sees one version of every file; one
    that reads through the user-visible names sees only complete files."""
    target = str(tmp_path)
    w = AtomicWriter(target)
    keys = ["a", "b", "nested/c", "nested/deep/d"]
    size = 64 * 1024  # larger than one write() might be for a reader to catch

    def version(i: int) -> dict[str, FileProjection]:
        return {k: FileProjection((f"{i:08d}" * (size // 8)).encode()) for k in keys}

    w.write(version(0))
    stop = threading.Event()
    problems: list[str] = []
    snapshots = [0]
    visible_reads = [0]

    def snapshot_reader() -> None:
        while not stop.is_set():
            try:
                fd = os.open(os.path.join(target, DATA_DIR), os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                problems.append("..data missing")
                return
            try:
                seen = set()
                for k in keys:
                    # Relative to the version resolved above, not to ..data now.
                    kfd = os.open(k, os.O_RDONLY, dir_fd=fd)
                    with os.fdopen(kfd, "rb") as fh:
                        content = fh.read()
                    if len(content) != size or content != content[:8] * (size // 8):
                        problems.append(f"partial {k}")
                    seen.add(content[:8])
                if len(seen) != 1:
                    problems.append(f"mixed set {sorted(seen)}")
                snapshots[0] += 1
            except FileNotFoundError:
                pass  # the version read was retired meanwhile: read again
            finally:
                os.close(fd)

    def visible_reader() -> None:
        while not stop.is_set():
            for k in keys:
                # A path resolved through the old version can find that version
                # retired right after the swap (upstream's writer has the same
                # window): a second look must find the file.
                content = None
                for _ in range(3):
                    try:
                        with open(os.path.join(target, k), "rb") as fh:
                            content = fh.read()
                        break
                    except FileNotFoundError:
                        continue
                if content is None:
                    problems.append(f"{k} missing")
                    continue
                if len(content) != size or content != content[:8] * (size // 8):
                    problems.append(f"partial {k}")
                visible_reads[0] += 1

    readers = [threading.Thread(target=snapshot_reader), threading.Thread(target=visible_reader)]
    for t in readers:
        t.start()
    try:
        # At least 1.5 s, and on a loaded machine until each side did enough
        # rounds to mean something (at most 20 s).
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < 1.5 or (
            time.monotonic() - start < 20
            and not (i > 10 and snapshots[0] > 10 and visible_reads[0] > 10)
        ):
            i += 1
            assert w.write(version(i))
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert problems == []
    assert i > 10 and snapshots[0] > 10 and visible_reads[0] > 10
    assert len(ts_dirs(target)) == 1


async def test_volume_writer_creates_dir_and_skips_known_payload(tmp_path: Path) -> None:
    target = str(tmp_path / "pods" / "uid" / "volumes" / "kubernetes.io~configmap" / "v")
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    w = VolumeWriter()
    assert await w.write(pod, "v", target, {"a": fp("1")})
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777
    data = os.readlink(os.path.join(target, DATA_DIR))
    assert not await w.write(pod, "v", target, {"a": fp("1")})
    # A fresh writer (a restarted kubelet) compares with the disk instead.
    assert not await VolumeWriter().write(pod, "v", target, {"a": fp("1")})
    assert os.readlink(os.path.join(target, DATA_DIR)) == data
    assert await w.write(pod, "v", target, {"a": fp("2")})
    await w.remove(target)
    assert not os.path.exists(target)
    await w.remove(target)  # idempotent
    # Removed behind the writer's back: the memo must not hide it.
    assert await w.write(pod, "v", target, {"a": fp("2")})
    import shutil

    shutil.rmtree(target)
    assert await w.write(pod, "v", target, {"a": fp("2")})
    assert read(os.path.join(target, "a")) == "2"


async def test_volume_writer_makes_nested_mountpoints(tmp_path: Path) -> None:
    target = str(tmp_path / "v")
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "volumeMounts": [
                        {"name": "v", "mountPath": "/etc/cfg"},
                        {"name": "other", "mountPath": "/etc/cfg/sub/dir"},
                        {"name": "unrelated", "mountPath": "/etc/cfgx"},
                    ],
                }
            ]
        },
    }
    await VolumeWriter().write(pod, "v", target, {"a": fp("1")})
    assert os.path.isdir(os.path.join(target, "sub/dir"))
    assert not os.path.exists(os.path.join(target, "x"))
