"""make_mounts: volumeMounts -> CRI bind mounts, subPath safety, propagation."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.mounts import has_subpath, make_mounts
from kubelet.container.runtime import ContainerConfigError, Mount
from kubelet.testing.helpers import can_mount_tmpfs
from kubelet.testing.parts import part_unavailable
from kubelet.volumemanager import MountedVolume

POD = {"metadata": {"uid": "u1", "name": "p", "namespace": "ns"}, "spec": {}}


def ctr(*mounts: dict[str, Any], privileged: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "volumeMounts": list(mounts)}
    if privileged:
        c["securityContext"] = {"privileged": True}
    return c


def no_expand(s: str) -> str:
    raise AssertionError("not called without subPathExpr")


def pod_dir_for(vols: dict[str, MountedVolume]) -> str:
    """The pod dir next to the first volume (subPath targets go under it)."""
    if not vols:
        return "/nonexistent/pods/u1"
    d = Path(next(iter(vols.values())).host_path).parent / "pods" / "u1"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def target(vols: dict[str, MountedVolume], index: int, volume: str = "data") -> str:
    return os.path.join(pod_dir_for(vols), "volume-subpaths", volume, "app", str(index))


def mounts(c: dict[str, Any], vols: dict[str, MountedVolume], expand=no_expand) -> list[Mount]:
    return make_mounts(POD, c, vols, expand, pod_dir_for(vols))


def error(c: dict[str, Any], vols: dict[str, MountedVolume], expand=no_expand) -> str:
    with pytest.raises(ContainerConfigError) as err:
        mounts(c, vols, expand)
    return str(err.value)


@pytest.fixture
def vol(tmp_path: Path) -> MountedVolume:
    d = tmp_path / "vol"
    d.mkdir()
    d.chmod(0o777)
    return MountedVolume("data", str(d), selinux_relabel=True)


def test_plain_mounts(vol: MountedVolume):
    ro = MountedVolume("ro", "/srv/ro", read_only=True)
    out = mounts(
        ctr({"name": "data", "mountPath": "/data"},
            {"name": "data", "mountPath": "cache/", "readOnly": True},
            {"name": "ro", "mountPath": "/ro"}),
        {"data": vol, "ro": ro},
    )  # fmt: skip
    assert out == [
        Mount("/data", vol.host_path, read_only=False, selinux_relabel=True),
        Mount("/cache", vol.host_path, read_only=True, selinux_relabel=True),
        Mount("/ro", "/srv/ro", read_only=True),  # the volume itself is read-only
    ]
    assert mounts({"name": "app"}, {}) == []


def test_volume_not_mounted(vol: MountedVolume):
    assert error(ctr({"name": "other", "mountPath": "/x"}), {"data": vol}) == (
        'cannot find volume "other" to mount into container "app"'
    )


def test_propagation(vol: MountedVolume):
    def prop(mode: Any, privileged: bool = False) -> str:
        m = {"name": "data", "mountPath": "/d", "mountPropagation": mode}
        return mounts(ctr(m, privileged=privileged), {"data": vol})[0].propagation

    assert prop(None) == "" and prop("None") == ""
    assert prop("HostToContainer") == "HostToContainer"
    assert prop("Bidirectional", privileged=True) == "Bidirectional"
    bidi = ctr({"name": "data", "mountPath": "/d", "mountPropagation": "Bidirectional"})
    assert "Bidirectional mount propagation is available only to privileged containers" in error(
        bidi, {"data": vol}
    )
    bad = ctr({"name": "data", "mountPath": "/d", "mountPropagation": "Sideways"})
    assert error(bad, {"data": vol}) == 'invalid MountPropagation mode: "Sideways"'


def test_subpath_existing_and_created(vol: MountedVolume):
    base = Path(vol.host_path)
    (base / "conf").mkdir()
    (base / "conf" / "app.ini").write_text("x")
    out = mounts(
        ctr({"name": "data", "mountPath": "/etc/app.ini", "subPath": "conf/app.ini"},
            {"name": "data", "mountPath": "/logs", "subPath": "logs/app"}),
        {"data": vol},
    )  # fmt: skip
    # What the runtime gets is the bind mount of what was opened.
    assert out[0].host_path == target({"data": vol}, 0)
    assert Path(out[0].host_path).read_text() == "x"
    assert out[1].host_path == target({"data": vol}, 1)
    assert os.path.samestat(os.stat(out[1].host_path), os.stat(base / "logs" / "app"))
    old = os.umask(0o077)
    try:
        mounts(ctr({"name": "data", "mountPath": "/x", "subPath": "made/here"}), {"data": vol})
    finally:
        os.umask(old)
    # Created with the volume's mode, whatever the umask.
    assert stat.S_IMODE((base / "made" / "here").stat().st_mode) == 0o777
    assert stat.S_IMODE((base / "made").stat().st_mode) == 0o777


def test_subpath_expr(vol: MountedVolume):
    c = ctr({"name": "data", "mountPath": "/out", "subPathExpr": "$(POD_NAME)/logs"})
    out = mounts(c, {"data": vol}, lambda s: s.replace("$(POD_NAME)", "web-0"))
    made = os.path.join(vol.host_path, "web-0", "logs")
    assert out[0].host_path == target({"data": vol}, 0)
    assert os.path.samestat(os.stat(out[0].host_path), os.stat(made))
    # The expanded value gets the same checks.
    assert error(c, {"data": vol}, lambda s: "../x") == (
        "unable to provision SubPath `../x`: must not contain '..'"
    )
    assert has_subpath(c) and not has_subpath(ctr({"name": "data", "mountPath": "/d"}))


def test_subpath_absolute_and_backsteps_refused(vol: MountedVolume):
    assert error(ctr({"name": "data", "mountPath": "/x", "subPath": "/etc"}), {"data": vol}) == (
        "error SubPath `/etc` must not be an absolute path"
    )
    assert error(
        ctr({"name": "data", "mountPath": "/x", "subPath": "a/../../etc"}), {"data": vol}
    ) == ("unable to provision SubPath `a/../../etc`: must not contain '..'")


def test_subpath_symlink_escapes_refused(vol: MountedVolume, tmp_path: Path):
    base = Path(vol.host_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("s3cret")
    (base / "abs").symlink_to(secret)
    (base / "rel").symlink_to("../secret")
    (base / "file").symlink_to(secret / "key")
    prepare = 'failed to prepare subPath for volumeMount "data" of container "app"'
    for sub in ("abs", "rel", "file", "abs/key"):
        assert (
            error(ctr({"name": "data", "mountPath": "/x", "subPath": sub}), {"data": vol})
            == prepare
        )
    # A missing dir under a link that leads out is not created out there, and
    # the answer does not tell whether the host path behind the link exists.
    for sub in ("abs/newdir", "abs/key", "rel/newdir"):
        msg = error(ctr({"name": "data", "mountPath": "/x", "subPath": sub}), {"data": vol})
        assert msg == prepare
    assert not (secret / "newdir").exists()


def test_subpath_symlink_inside_volume_allowed(vol: MountedVolume):
    # configMap/secret volumes are made of symlinks into ..data: those stay inside.
    base = Path(vol.host_path)
    (base / "..2026_01_01").mkdir()
    (base / "..2026_01_01" / "key").write_text("v")
    (base / "..data").symlink_to("..2026_01_01")
    (base / "key").symlink_to("..data/key")
    out = mounts(ctr({"name": "data", "mountPath": "/k", "subPath": "key"}), {"data": vol})
    assert out[0].host_path == target({"data": vol}, 0)
    assert Path(out[0].host_path).read_text() == "v"


def test_volume_path_itself_may_be_a_symlink(tmp_path: Path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    vols = {"v": MountedVolume("v", str(link))}
    out = mounts(ctr({"name": "v", "mountPath": "/x", "subPath": "sub"}), vols)
    assert out[0].host_path == target(vols, 0, "v")
    assert os.path.samestat(os.stat(out[0].host_path), os.stat(real / "sub"))


def test_subpath_bind_mounted_under_the_pod_dir(vol: MountedVolume, tmp_path: Path):
    from kubelet.util import mountutil
    from kubelet.volumemanager.subpath import clean_subpaths

    base = Path(vol.host_path)
    (base / "conf").mkdir()
    (base / "conf" / "app.ini").write_text("one")
    pod_dir = tmp_path / "pods" / "u1"
    pod_dir.mkdir(parents=True)
    c = ctr({"name": "data", "mountPath": "/d"},
            {"name": "data", "mountPath": "/etc/app.ini", "subPath": "conf/app.ini"},
            {"name": "data", "mountPath": "/conf", "subPath": "conf"})  # fmt: skip
    if not can_mount_tmpfs(str(tmp_path)):
        # Never the plain path, which the runtime would look up again.
        with pytest.raises(ContainerConfigError):
            make_mounts(POD, c, {"data": vol}, no_expand, str(pod_dir))
        return
    try:
        out = make_mounts(POD, c, {"data": vol}, no_expand, str(pod_dir))
        target = pod_dir / "volume-subpaths" / "data" / "app" / "1"
        assert out[0].host_path == vol.host_path
        assert out[1].host_path == str(target)
        assert out[2].host_path == str(pod_dir / "volume-subpaths" / "data" / "app" / "2")
        assert mountutil.mount_fstype(str(target)) is not None
        assert target.read_text() == "one"
        # A restart of the container reuses the mount.
        again = make_mounts(POD, c, {"data": vol}, no_expand, str(pod_dir))
        assert again[1].host_path == str(target)
        assert sum(1 for line in open("/proc/self/mountinfo") if f" {target} " in line) == 1
        # Swapping the subPath for a symlink afterwards does not redirect the target.
        (base / "conf" / "app.ini").rename(base / "conf" / "old.ini")
        (base / "conf" / "app.ini").symlink_to("/etc/hostname")
        assert target.read_text() == "one"
    finally:
        clean_subpaths(str(pod_dir), "data")
    assert not (pod_dir / "volume-subpaths").exists()
    assert (base / "conf" / "old.ini").read_text() == "one"


def test_subpath_that_cannot_be_bind_mounted_fails_the_container(
    vol: MountedVolume, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel refuses the bind mount (EPERM: no CAP_SYS_ADMIN), the
    container fails: the plain path would be looked up again by the runtime,
    after a container sharing the volume may have swapped a link in."""
    from kubelet.util import mountutil

    (Path(vol.host_path) / "conf").mkdir()

    def refuse(source: str, target: str, fstype: str, options: str = "", flags: int = 0) -> None:
        raise OSError(errno.EPERM, "Operation not permitted", target)

    monkeypatch.setattr(mountutil, "mount", refuse)
    c = ctr({"name": "data", "mountPath": "/conf", "subPath": "conf"})
    assert error(c, {"data": vol}) == (
        'failed to prepare subPath for volumeMount "data" of container "app"'
    )
    # Nothing is left behind for the next attempt to trip over.
    assert not os.path.lexists(target({"data": vol}, 0))


def test_subpath_swapped_for_a_link_after_it_was_opened_changes_nothing(
    vol: MountedVolume, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container replaces the subPath with a link out after the kubelet
    resolved it: what is bound (and handed to the runtime) is the directory
    the kubelet opened, not where the link now points."""
    from kubelet.util import mountutil

    if not can_mount_tmpfs(str(tmp_path)):
        part_unavailable("bind mounts", "this test needs CAP_SYS_ADMIN (the kubelet runs with it)")
    base = Path(vol.host_path)
    (base / "conf").mkdir()
    (base / "conf" / "app.ini").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    real_mount = mountutil.mount

    def swap_then_mount(source: str, target: str, fstype: str, options: str = "", flags: int = 0):
        (base / "conf").rename(base / "conf.old")
        (base / "conf").symlink_to(outside)
        real_mount(source, target, fstype, options, flags)

    monkeypatch.setattr(mountutil, "mount", swap_then_mount)
    out = mounts(ctr({"name": "data", "mountPath": "/conf", "subPath": "conf"}), {"data": vol})
    bound = Path(out[0].host_path)
    assert sorted(os.listdir(bound)) == ["app.ini"]
    assert (bound / "app.ini").read_text() == "mine"


@pytest.mark.parametrize(
    ("mode", "read_only", "propagation", "supported", "want"),
    [
        (None, True, None, True, False),
        ("Disabled", True, None, True, False),
        ("IfPossible", True, None, True, True),
        ("IfPossible", True, None, False, False),  # falls back to a plain read-only mount
        ("Enabled", True, "None", True, True),
        ("Enabled", True, None, False, 'volume "data" requested recursive read-only mode, but it is not supported by the runtime'),
        ("Enabled", False, None, True, 'volume "data" requested recursive read-only mode, but it is not read-only'),
        ("IfPossible", True, "HostToContainer", True, 'volume "data" requested recursive read-only mode, but it is not compatible with propagation "HostToContainer"'),
        ("Sometimes", True, None, True, 'unknown recursive read-only mode "Sometimes"'),
    ],
)  # fmt: skip
def test_recursive_read_only_is_resolved_as_upstream(
    vol: MountedVolume, mode: Any, read_only: bool, propagation: Any, supported: bool, want: Any
) -> None:
    m = {"name": "data", "mountPath": "/d", "readOnly": read_only,
         "recursiveReadOnly": mode, "mountPropagation": propagation}  # fmt: skip
    c, vols = ctr(m), {"data": vol}
    if isinstance(want, bool):
        (out,) = make_mounts(POD, c, vols, no_expand, pod_dir_for(vols), supported)
        assert (out.read_only, out.recursive_read_only) == (read_only, want)
        return
    with pytest.raises(ContainerConfigError) as err:
        make_mounts(POD, c, vols, no_expand, pod_dir_for(vols), supported)
    assert str(err.value) == f"failed to resolve recursive read-only mode: {want}"
