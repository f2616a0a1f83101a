"""emptyDir: on disk, and as tmpfs where this machine lets us mount."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kubelet.testing.helpers import can_mount_tmpfs
from kubelet.util import mountutil
from kubelet.volume import VolumeError
from kubelet.volume.emptydir import EmptyDirPlugin, tmpfs_size

GI = 1 << 30


def pod(containers=None, fs_group=None):
    spec = {"containers": containers or [{"name": "c"}]}
    if fs_group is not None:
        spec["securityContext"] = {"fsGroup": fs_group}
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default"}, "spec": spec}


def vol(**src):
    return {"name": "v", "emptyDir": src}


async def test_disk_set_up_and_tear_down(tmp_path: Path):
    p = EmptyDirPlugin()
    d = tmp_path / "pods/u1/volumes/kubernetes.io~empty-dir/v"
    old = os.umask(0o022)
    try:
        await p.set_up(pod(), vol(), str(d))
    finally:
        os.umask(old)
    assert d.is_dir() and stat.S_IMODE(d.stat().st_mode) == 0o777
    (d / "data").write_text("hello")
    await p.set_up(pod(), vol(), str(d))  # idempotent: content kept
    assert (d / "data").read_text() == "hello"
    (d / "sub").mkdir()
    (d / "sub" / "link").symlink_to("/etc")
    await p.tear_down("u1", "v", str(d))
    assert not d.exists()
    assert os.path.isdir("/etc")
    await p.tear_down("u1", "v", str(d))  # gone already: fine


async def test_fs_group(tmp_path: Path):
    d = tmp_path / "v"
    await EmptyDirPlugin().set_up(pod(fs_group=1234), vol(), str(d))
    st = d.stat()
    assert st.st_gid == 1234 and st.st_mode & stat.S_ISGID and st.st_mode & 0o070 == 0o070


def test_tmpfs_size():
    assert tmpfs_size(pod(), vol(medium="Memory"), 8 * GI) == 8 * GI
    limited = pod([{"name": "a", "resources": {"limits": {"memory": "1Gi"}}},
                   {"name": "b", "resources": {"limits": {"memory": "512Mi"}}}])  # fmt: skip
    assert tmpfs_size(limited, vol(medium="Memory"), 8 * GI) == GI + GI // 2
    partly = pod([{"name": "a", "resources": {"limits": {"memory": "1Gi"}}}, {"name": "b"}])
    assert tmpfs_size(partly, vol(medium="Memory"), 8 * GI) == 8 * GI
    assert tmpfs_size(limited, vol(medium="Memory", sizeLimit="64Mi"), 8 * GI) == 64 << 20
    # sizeLimit above what the pod may use does not raise the size.
    assert tmpfs_size(limited, vol(medium="Memory", sizeLimit="4Gi"), 8 * GI) == GI + GI // 2
    assert tmpfs_size(pod(), vol(medium="Memory", sizeLimit="0"), 8 * GI) == 8 * GI


async def test_hugepages_not_supported(tmp_path: Path):
    with pytest.raises(
        VolumeError, match="emptyDir medium 'HugePages' is not supported by this kubelet"
    ):
        await EmptyDirPlugin().set_up(pod(), vol(medium="HugePages"), str(tmp_path / "v"))
    with pytest.raises(VolumeError, match='unknown storage medium "Floppy"'):
        await EmptyDirPlugin().set_up(pod(), vol(medium="Floppy"), str(tmp_path / "v"))


async def test_memory_not_permitted_gives_clear_error(tmp_path: Path, monkeypatch):
    def deny(*a, **kw):
        raise OSError(errno.EPERM, "Operation not permitted", a[1])

    monkeypatch.setattr(mountutil, "mount", deny)
    with pytest.raises(VolumeError) as err:
        await EmptyDirPlugin().set_up(pod(), vol(medium="Memory"), str(tmp_path / "v"))
    msg = str(err.value)
    assert "emptyDir medium Memory needs a tmpfs mount" in msg
    assert "not permitted" in msg and "CAP_SYS_ADMIN" in msg


async def test_memory_tmpfs(tmp_path: Path):
    d = tmp_path / "v"
    p = EmptyDirPlugin(node_allocatable_memory=lambda: 8 * GI)
    spec = vol(medium="Memory", sizeLimit="8Mi")
    if not can_mount_tmpfs(str(tmp_path)):
        with pytest.raises(VolumeError, match="tmpfs"):
            await p.set_up(pod(), spec, str(d))
        return
    try:
        await p.set_up(pod(), spec, str(d))
        assert mountutil.mount_fstype(str(d)) == "tmpfs"
        sv = os.statvfs(d)
        assert sv.f_blocks * sv.f_frsize == 8 << 20
        (d / "f").write_text("in memory")
        await p.set_up(pod(), spec, str(d))  # no second mount over the first
        assert (d / "f").read_text() == "in memory"
        assert sum(1 for line in open("/proc/self/mountinfo") if f" {d} " in line) == 1
        assert p.can_adopt(spec, str(d), "tmpfs")
        assert not p.can_adopt(spec, str(d), None)
        assert p.can_adopt(vol(), str(d), None)
    finally:
        await p.tear_down("u1", "v", str(d))
    assert mountutil.mount_fstype(str(d)) is None and not d.exists()


async def test_tear_down_never_crosses_a_mount(tmp_path: Path):
    if not can_mount_tmpfs(str(tmp_path)):
        pytest.skip("mounting is not permitted here")
    d = tmp_path / "v"
    p = EmptyDirPlugin()
    await p.set_up(pod(), vol(), str(d))
    inner = d / "inner"
    inner.mkdir()
    mountutil.mount("tmpfs", str(inner), "tmpfs", "size=65536")
    try:
        (inner / "precious").write_text("x")
        with pytest.raises(VolumeError):
            await p.tear_down("u1", "v", str(d))
        assert (inner / "precious").read_text() == "x"
    finally:
        mountutil.umount(str(inner))
    await p.tear_down("u1", "v", str(d))
    assert not d.exists()
