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
from kubelet.volume.emptydir import EmptyDirPlugin, hugepage_size, tmpfs_size

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


def huge(*sizes, init=(), pod_level=None):
    def c(name, size):
        return {"name": name, "resources": {"requests": {f"hugepages-{size}": "4Mi"}}}

    p = pod([c(f"c{i}", s) for i, s in enumerate(sizes)] or [{"name": "c"}])
    p["spec"]["initContainers"] = [c(f"i{i}", s) for i, s in enumerate(init)]
    if pod_level:
        p["spec"]["resources"] = {"requests": {f"hugepages-{pod_level}": "4Mi"}}
    return p


def test_hugepage_size_from_the_pods_requests():
    assert hugepage_size(huge("2Mi"), "HugePages") == "2Mi"
    assert hugepage_size(huge("2Mi", "1Gi"), "HugePages-1Gi") == "1Gi"
    assert hugepage_size(huge("2048Ki"), "HugePages-2Mi") == "2048Ki"  # the same size
    assert hugepage_size(huge(init=["2Mi"]), "HugePages") == "2Mi"
    assert hugepage_size(huge(pod_level="1Gi"), "HugePages-1Gi") == "1Gi"
    with pytest.raises(VolumeError, match="can't be used if container requests multiple huge"):
        hugepage_size(huge("2Mi", "1Gi"), "HugePages")
    with pytest.raises(VolumeError, match="but there is no resource request for huge pages"):
        hugepage_size(huge("2Mi"), "HugePages-1Gi")
    with pytest.raises(VolumeError, match="but there is no resource request for huge pages"):
        hugepage_size(pod(), "HugePages")
    for bad in ("HugePages-", "HugePagesX", "HugePages-abc"):
        with pytest.raises(VolumeError, match="unknown storage medium"):
            hugepage_size(huge("2Mi"), bad)


async def test_unknown_medium(tmp_path: Path):
    with pytest.raises(VolumeError, match='unknown storage medium "Floppy"'):
        await EmptyDirPlugin().set_up(pod(), vol(medium="Floppy"), str(tmp_path / "v"))


async def test_hugepages_mount_hugetlbfs_of_the_requested_size(tmp_path: Path, monkeypatch):
    mounts = []
    monkeypatch.setattr(mountutil, "mount", lambda *a: mounts.append(a))
    d = tmp_path / "v"
    await EmptyDirPlugin().set_up(huge("2Mi"), vol(medium="HugePages-2Mi"), str(d))
    assert mounts == [("nodev", str(d), "hugetlbfs", "pagesize=2Mi")]
    p = EmptyDirPlugin()
    assert p.can_adopt(vol(medium="HugePages"), str(d), "hugetlbfs")
    assert not p.can_adopt(vol(medium="HugePages"), str(d), None)  # after a reboot


async def test_hugepages_on_this_machine(tmp_path: Path):
    d = tmp_path / "v"
    p = EmptyDirPlugin()
    try:
        await p.set_up(huge("2Mi"), vol(medium="HugePages"), str(d))
    except VolumeError as err:
        # An unprivileged run, or a kernel without 2 MiB huge pages: said so.
        assert "not permitted" in str(err) or "mount failed" in str(err)
        return
    try:
        table = mountutil.mount_table()
        assert mountutil.mount_fstype(str(d), table) == "hugetlbfs"
        await p.set_up(huge("2Mi"), vol(medium="HugePages"), str(d))  # idempotent
    finally:
        await p.tear_down("u1", "v", str(d))
    assert not d.exists()


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
