"""The volume manager's reconciler on a fake clock with fake plugins."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kubelet.util import mountutil
from kubelet.volume import VolumeError, VolumeHost
from kubelet.volume.emptydir import EmptyDirPlugin
from kubelet.volumemanager.manager import VolumeManagerImpl
from kubelet.volumemanager.operations import MAX_BACKOFF
from tests.unit.volume.fixtures import Env, FakePlugin, mkpod


def fake(name: str) -> dict[str, Any]:
    return {"name": name, "fake": {}}


def voldir(root: Path, uid: str, name: str, plugin: str = "test~fake") -> Path:
    return root / "pods" / uid / "volumes" / plugin / name


async def test_volumes_set_up_then_pod_ready(tmp_path: Path):
    env = Env(tmp_path)
    pod = mkpod("a", fake("v1"), fake("v2"))
    env.mgr.add_pod(pod)
    assert sorted(env.mgr.unmounted_volumes(pod)) == ["v1", "v2"]
    await env.settle()
    assert env.mgr.unmounted_volumes(pod) == []
    assert env.ready == ["a"]
    mounted = env.mgr.get_mounted_volumes("a")
    assert mounted["v1"].host_path == str(voldir(tmp_path, "a", "v1"))
    assert (voldir(tmp_path, "a", "v2") / "data").read_text() == "v2"
    await env.settle()
    assert env.ready == ["a"] and len(env.plugin.set_ups) == 2  # nothing redone


async def test_pod_without_volumes_is_ready_at_once(tmp_path: Path):
    env = Env(tmp_path)
    pod = mkpod("a")
    env.mgr.add_pod(pod)
    assert env.mgr.unmounted_volumes(pod) == []
    await env.settle()
    assert env.ready == []  # never waited: no callback needed
    # A pod the manager was never told about waits for all its volumes.
    assert env.mgr.unmounted_volumes(mkpod("b", fake("x"))) == ["x"]


async def test_slow_volume_does_not_hold_up_other_pods(tmp_path: Path):
    env = Env(tmp_path)
    env.plugin.gates["slow"] = asyncio.Event()
    slow, quick = mkpod("a", fake("slow"), fake("ok")), mkpod("b", fake("v"))
    env.mgr.add_pod(slow)
    env.mgr.add_pod(quick)
    for _ in range(5):
        env.mgr.reconcile()
        await asyncio.sleep(0)
    assert env.ready == ["b"]
    assert env.mgr.unmounted_volumes(slow) == ["slow"]
    # Reconciling again starts no second operation on the busy volume.
    env.mgr._mark_dirty("a")
    env.mgr.reconcile()
    assert env.plugin.set_ups.count(("a", "slow")) == 1
    env.plugin.gates["slow"].set()
    await env.settle()
    assert env.ready == ["b", "a"]


async def test_failing_volume_backs_off_and_reports_failed_mount(tmp_path: Path):
    env = Env(tmp_path)
    env.plugin.fail["bad"] = 'configmap "cm" not found'
    bad, good = mkpod("a", fake("bad"), name="web"), mkpod("b", fake("v"))
    env.mgr.add_pod(bad)
    env.mgr.add_pod(good)
    await env.settle()
    assert env.ready == ["b"]
    ref, etype, reason, msg = env.events[0]
    assert (etype, reason) == ("Warning", "FailedMount")
    assert msg == 'MountVolume.SetUp failed for volume "bad" : configmap "cm" not found'
    assert ref["kind"] == "Pod" and ref["name"] == "web" and ref["uid"] == "a"
    attempts = lambda: env.plugin.set_ups.count(("a", "bad"))  # noqa: E731
    assert attempts() == 1
    await env.step(0.4)
    assert attempts() == 1  # still backing off
    await env.step(0.1)
    assert attempts() == 2
    await env.step(0.9)
    assert attempts() == 2
    await env.step(0.1)  # 1 s after the second failure
    assert attempts() == 3
    for _ in range(12):
        await env.step(MAX_BACKOFF)
    n = attempts()
    await env.step(MAX_BACKOFF - 1)
    assert attempts() == n  # capped at ~2 min, not shorter
    await env.step(1)
    assert attempts() == n + 1
    assert len(env.events) == attempts()  # one event per failed attempt, as upstream
    # The cause is fixed: the next retry mounts it and the pod becomes ready.
    del env.plugin.fail["bad"]
    await env.step(MAX_BACKOFF)
    assert env.mgr.unmounted_volumes(bad) == []
    assert env.ready == ["b", "a"]


async def test_unsupported_volume_types(tmp_path: Path):
    env = Env(tmp_path)
    pod = mkpod(
        "a",
        fake("ok"),
        {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}},
        {"name": "img", "image": {"reference": "busybox"}},
        {"name": "share", "nfs": {"server": "s", "path": "/"}},
    )
    env.mgr.add_pod(pod)
    await env.settle()
    assert sorted(env.mgr.unmounted_volumes(pod)) == ["eph", "img", "share"]
    assert env.messages() == [
        'MountVolume.SetUp failed for volume "eph" : volume type "ephemeral" is not supported by this kubelet',
        'MountVolume.SetUp failed for volume "img" : image volumes are not supported by this kubelet',
        'MountVolume.SetUp failed for volume "share" : volume type "nfs" is not supported by this kubelet',
    ]
    assert env.ready == []
    await env.step(600)
    assert len(env.events) == 3  # the spec cannot change: said once


async def test_remount_periodic_and_explicit(tmp_path: Path):
    env = Env(tmp_path, FakePlugin(requires_remount=True))
    env.mgr.add_pod(mkpod("a", fake("cm")))
    await env.settle()
    assert env.plugin.set_ups == [("a", "cm")]
    await env.step(59)
    assert len(env.plugin.set_ups) == 1
    await env.step(13)  # period 60 s + up to 20 % jitter
    assert len(env.plugin.set_ups) == 2
    env.mgr.remount("a")
    await env.settle()
    assert len(env.plugin.set_ups) == 3
    # New labels reach downwardAPI files: add_pod with changed metadata remounts.
    pod2 = mkpod("a", fake("cm"))
    pod2["metadata"]["labels"] = {"x": "y"}
    env.mgr.add_pod(pod2)
    await env.settle()
    assert len(env.plugin.set_ups) == 4
    env.mgr.add_pod(pod2)  # unchanged: nothing
    await env.settle()
    assert len(env.plugin.set_ups) == 4
    # A failing remount keeps the volume mounted and is retried with back-off.
    env.plugin.fail["cm"] = "boom"
    env.mgr.remount("a")
    await env.settle()
    assert env.mgr.unmounted_volumes(pod2) == [] and env.messages()[-1].endswith(": boom")
    del env.plugin.fail["cm"]
    await env.step(0.5)
    assert len(env.plugin.set_ups) == 6


async def test_a_failed_in_use_expansion_is_a_resize_event(tmp_path: Path):
    """A remount's VolumeResizeFailed (the CSI plugin's in-use expansion) is
    that event, not FailedMount; the volume stays mounted."""
    env = Env(tmp_path, FakePlugin(requires_remount=True))
    pod = mkpod("a", fake("cm"))
    env.mgr.add_pod(pod)
    await env.settle()
    env.plugin.fail["cm"] = VolumeError(
        "rpc error: out of space", "NodeExpandVolume.NodeExpandVolume", "VolumeResizeFailed"
    )
    env.mgr.remount("a")
    await env.settle()
    _, etype, reason, msg = env.events[-1]
    assert (etype, reason) == ("Warning", "VolumeResizeFailed")
    assert (
        msg == 'NodeExpandVolume.NodeExpandVolume failed for volume "cm" : rpc error: out of space'
    )
    assert env.mgr.unmounted_volumes(pod) == []


async def test_plain_plugins_are_not_remounted(tmp_path: Path):
    env = Env(tmp_path)
    env.mgr.add_pod(mkpod("a", fake("v")))
    await env.settle()
    env.mgr.remount("a")
    await env.step(300)
    assert len(env.plugin.set_ups) == 1


async def test_teardown_after_remove_pod(tmp_path: Path):
    env = Env(tmp_path)
    pod = mkpod("a", fake("v1"), fake("v2"))
    env.mgr.add_pod(pod)
    await env.settle()
    (tmp_path / "pods" / "a" / "etc-hosts").write_text("")
    env.mgr.remove_pod("a")
    waiter = asyncio.ensure_future(env.mgr.wait_for_unmount("a", 5))
    await env.settle()
    await asyncio.sleep(0.05)
    await env.settle()
    assert await waiter is True
    assert sorted(env.plugin.tear_downs) == [("a", "v1"), ("a", "v2")]
    assert not (tmp_path / "pods" / "a" / "volumes").exists()
    assert (tmp_path / "pods" / "a" / "etc-hosts").exists()  # the pod dir is not ours
    assert env.mgr.get_mounted_volumes("a") == {}
    assert env.mgr.asw.pods == {} and env.mgr.ops._backoff == {}


async def test_wait_for_unmount_times_out_while_mounted(tmp_path: Path):
    env = Env(tmp_path)
    env.mgr.add_pod(mkpod("a", fake("v")))
    await env.settle()
    assert await env.mgr.wait_for_unmount("a", 0.01) is False
    assert await env.mgr.wait_for_unmount("never-seen", 0.01) is True


async def test_failing_teardown_is_retried(tmp_path: Path):
    env = Env(tmp_path)
    env.mgr.add_pod(mkpod("a", fake("v")))
    await env.settle()
    env.plugin.fail["v"] = "device busy"
    env.mgr.remove_pod("a")
    await env.settle()
    assert env.plugin.tear_downs == [("a", "v")]
    assert "a" in env.mgr.asw.pods
    await env.step(0.5)
    assert len(env.plugin.tear_downs) == 2
    del env.plugin.fail["v"]
    await env.step(1.0)
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.mgr.asw.pods == {}
    assert env.events == []  # no FailedMount for a tear-down


async def test_remove_while_setting_up(tmp_path: Path):
    env = Env(tmp_path)
    env.plugin.gates["v"] = asyncio.Event()
    env.mgr.add_pod(mkpod("a", fake("v")))
    env.mgr.reconcile()
    await asyncio.sleep(0)
    env.mgr.remove_pod("a")
    env.plugin.gates["v"].set()
    await env.settle()
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.plugin.tear_downs == [("a", "v")]
    assert not voldir(tmp_path, "a", "v").exists()
    assert env.ready == []


async def test_adoption_after_restart(tmp_path: Path):
    first = Env(tmp_path, FakePlugin(), FakePlugin("test/cm", "cm", requires_remount=True))
    pod = mkpod("a", fake("v"), {"name": "c", "cm": {}})
    first.mgr.add_pod(pod)
    await first.settle()
    (voldir(tmp_path, "a", "v") / "mine").write_text("kept")
    # kill -9: the new kubelet starts from the disk alone.
    second = Env(tmp_path, FakePlugin(), FakePlugin("test/cm", "cm", requires_remount=True))
    await second.mgr.reconstruct()
    second.mgr.add_pod(pod)
    assert second.mgr.unmounted_volumes(pod) == []  # ready without any set-up
    assert second.mgr.get_mounted_volumes("a")["v"].host_path == str(voldir(tmp_path, "a", "v"))
    await second.settle()
    assert second.plugins[0].set_ups == []
    # configMap-like content is refreshed once, in place.
    assert second.plugins[1].set_ups == [("a", "c")]
    assert (voldir(tmp_path, "a", "v") / "mine").read_text() == "kept"
    assert second.ready == []


async def test_found_dirs_wait_for_housekeeping(tmp_path: Path):
    d = voldir(tmp_path, "gone", "v")
    d.mkdir(parents=True)
    (voldir(tmp_path, "kept", "v")).mkdir(parents=True)
    env = Env(tmp_path)
    await env.mgr.reconstruct()
    await env.step(10)
    assert d.exists()  # sources may not have delivered the pod yet
    clean = await env.mgr.cleanup_orphaned_pods({"kept"})
    assert clean == []
    await env.settle()
    await asyncio.sleep(0.05)
    await env.settle()
    assert env.plugin.tear_downs == [("gone", "v")]
    assert not (tmp_path / "pods" / "gone" / "volumes").exists()
    assert voldir(tmp_path, "kept", "v").exists()
    # Now its dir has no volumes: housekeeping may remove it.
    assert await env.mgr.cleanup_orphaned_pods({"kept"}) == ["gone"]


async def test_orphan_cleanup_of_unknown_plugin_and_tmpfs(tmp_path: Path):
    # Dirs from a plugin this kubelet does not have are removed generically;
    # a Memory emptyDir's tmpfs is unmounted first.
    other = voldir(tmp_path, "x", "v", plugin="kubernetes.io~csi")
    other.mkdir(parents=True)
    (other / "f").write_text("x")
    mem = voldir(tmp_path, "x", "mem", plugin="kubernetes.io~empty-dir")
    mem.mkdir(parents=True)
    mounted = True
    try:
        mountutil.mount("tmpfs", str(mem), "tmpfs", "size=65536")
    except OSError:
        mounted = False
    try:
        env = Env(tmp_path, EmptyDirPlugin())
        await env.mgr.reconstruct()
        found = env.mgr.asw.pods["x"].entries[("kubernetes.io/empty-dir", "mem")]
        assert found.fstype == ("tmpfs" if mounted else None)
        await env.mgr.cleanup_orphaned_pods(set())
        for _ in range(3):
            await env.settle()
            await asyncio.sleep(0.05)
        assert not other.exists() and not mem.exists()
        assert mountutil.mount_fstype(str(mem)) is None
    finally:
        if mountutil.mount_fstype(str(mem)) is not None:
            mountutil.umount(str(mem))


async def test_memory_emptydir_adopted_only_while_mounted(tmp_path: Path):
    mem = voldir(tmp_path, "a", "mem", plugin="kubernetes.io~empty-dir")
    mem.mkdir(parents=True)
    env = Env(tmp_path, EmptyDirPlugin())
    await env.mgr.reconstruct()
    pod = mkpod("a", {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    env.mgr.add_pod(pod)
    # Not a tmpfs any more (a reboot): set up again, not adopted.
    assert env.mgr.unmounted_volumes(pod) == ["mem"]
    try:
        await env.settle()
        for _ in range(20):
            if env.ready or env.events:
                break
            await asyncio.sleep(0.02)
            await env.settle()
        if env.events:
            assert "tmpfs" in env.events[0][3]
        else:
            assert env.ready == ["a"] and mountutil.mount_fstype(str(mem)) == "tmpfs"
    finally:
        if mountutil.mount_fstype(str(mem)) is not None:
            mountutil.umount(str(mem))


async def test_run_loop(tmp_path: Path):
    env = Env(tmp_path)
    ready = asyncio.Event()
    env.mgr.on_pod_ready = lambda uid: ready.set()
    stop = asyncio.Event()
    task = asyncio.ensure_future(env.mgr.run(stop))
    env.mgr.add_pod(mkpod("a", fake("v")))
    await asyncio.wait_for(ready.wait(), 5)
    env.mgr.remove_pod("a")
    assert await env.mgr.wait_for_unmount("a", 5)
    env.plugin.fail["v"] = "nope"
    env.mgr.add_pod(mkpod("b", fake("v")))
    for _ in range(50):
        if env.events:
            break
        await asyncio.sleep(0.01)
    env.clock.step(0.5)
    env.mgr.poke()
    for _ in range(50):
        if len(env.plugin.set_ups) == 3:
            break
        await asyncio.sleep(0.01)
    assert len(env.plugin.set_ups) == 3
    stop.set()
    await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("n", [300])
async def test_many_pods_reconcile_only_what_changed(tmp_path: Path, n: int):
    env = Env(tmp_path)
    for i in range(n):
        env.mgr.add_pod(mkpod(f"p{i}", fake("v")))
    await env.settle()
    assert len(env.ready) == n
    calls = 0
    orig = env.mgr._reconcile_pod

    def counting(uid: str, now: float) -> None:
        nonlocal calls
        calls += 1
        orig(uid, now)

    env.mgr._reconcile_pod = counting  # type: ignore[method-assign]
    env.mgr.remount("p7")
    env.mgr.reconcile()
    assert calls == 1


def test_implementations_satisfy_the_protocols(tmp_path: Path):
    from kubelet.volume import VolumePlugin
    from kubelet.volume.hostpath import HostPathPlugin
    from kubelet.volume.pvc import PVCPlugin
    from kubelet.volumemanager import VolumeManager

    plugins: list[VolumePlugin] = [EmptyDirPlugin(), HostPathPlugin(), PVCPlugin(None)]
    vm: VolumeManager = VolumeManagerImpl(VolumeHost(str(tmp_path), "n"), plugins)
    assert vm.unmounted_volumes(mkpod("a")) == []


async def test_subpath_mounts_cleaned_at_teardown_and_for_orphans(tmp_path: Path):
    from kubelet.volumemanager.subpath import clean_subpaths

    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "sub" / "precious").write_text("x")
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        mountutil.mount("tmpfs", str(probe), "tmpfs", "size=4096")
        mountutil.umount(str(probe))
    except OSError:
        pytest.skip("mounting is not permitted here")
    root = tmp_path / "root"
    hp = {"name": "h", "hostPath": {"path": str(host)}}
    pod = mkpod("a", hp, fake("v"))
    c = {"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/h", "subPath": "sub"},
                                       {"name": "v", "mountPath": "/v", "subPath": "x"}]}  # fmt: skip
    try:
        await _subpath_cleanup_scenario(root, host, pod, hp, c)
    finally:  # never leave a bind mount behind a failed assertion
        for uid in ("a", "b"):
            clean_subpaths(str(root / "pods" / uid), "h")
            clean_subpaths(str(root / "pods" / uid), "v")


async def _subpath_cleanup_scenario(
    root: Path, host: Path, pod: dict[str, Any], hp: dict[str, Any], c: dict[str, Any]
) -> None:
    from kubelet.container.mounts import make_mounts
    from kubelet.volume.hostpath import HostPathPlugin

    env = Env(root, FakePlugin(), HostPathPlugin())
    env.mgr.add_pod(pod)
    await env.settle()
    pod_dir = root / "pods" / "a"
    out = make_mounts(pod, c, env.mgr.get_mounted_volumes("a"), str, str(pod_dir))
    assert out[0].host_path.startswith(str(pod_dir / "volume-subpaths" / "h"))
    # Restart: the hostPath volume made no dir, only its subPath mount is left.
    second = Env(root, FakePlugin(), HostPathPlugin())
    await second.mgr.reconstruct()
    second.mgr.add_pod(pod)
    await second.settle()
    assert ("", "h") not in second.mgr.asw.pods["a"].entries  # handed to the real volume
    second.mgr.remove_pod("a")
    for _ in range(5):
        await second.settle()
        await asyncio.sleep(0.02)
    assert not (pod_dir / "volume-subpaths").exists()
    assert (host / "sub" / "precious").read_text() == "x"
    # An orphan with only a subPath mount left is cleaned before it is reported clean.
    pod_b = mkpod("b", hp)
    env.mgr.add_pod(pod_b)
    await env.settle()
    make_mounts(pod_b, c | {"volumeMounts": c["volumeMounts"][:1]},
                env.mgr.get_mounted_volumes("b"), str, str(root / "pods" / "b"))  # fmt: skip
    third = Env(root, FakePlugin(), HostPathPlugin())
    await third.mgr.reconstruct()
    assert await third.mgr.cleanup_orphaned_pods(set()) == ["a"]  # b: not yet
    for _ in range(5):
        await third.settle()
        await asyncio.sleep(0.02)
    assert not (root / "pods" / "b" / "volume-subpaths").exists()
    assert sorted(await third.mgr.cleanup_orphaned_pods(set())) == ["a", "b"]
    assert (host / "sub" / "precious").read_text() == "x"


async def test_pod_re_added_before_teardown_keeps_its_volumes(tmp_path: Path):
    env = Env(tmp_path)
    pod = mkpod("a", fake("v"))
    env.mgr.add_pod(pod)
    await env.settle()
    env.mgr.remove_pod("a")
    env.mgr.add_pod(pod)  # same UID back before the reconciler ran
    await env.settle()
    assert env.plugin.tear_downs == [] and env.plugin.set_ups == [("a", "v")]
    assert env.mgr.unmounted_volumes(pod) == []


async def test_on_pod_ready_after_a_caller_saw_unmounted(tmp_path: Path):
    env = Env(tmp_path)
    env.plugin.gates["v"] = asyncio.Event()
    env.mgr.add_pod(mkpod("a", fake("v")))
    env.mgr.reconcile()
    await asyncio.sleep(0)
    env.mgr.remove_pod("a")
    env.plugin.gates["v"].set()
    for _ in range(5):
        await env.settle()
        await asyncio.sleep(0.02)
    assert env.mgr.asw.pods == {}
    # Back again: set up from scratch, and the waiting syncer hears of it.
    del env.plugin.gates["v"]
    pod = mkpod("a", fake("v"))
    env.mgr.add_pod(pod)
    assert env.mgr.unmounted_volumes(pod) == ["v"]
    await env.settle()
    assert env.ready == ["a"]


def _storage_ops(plugin: str, op: str, status: str) -> float:
    from kubelet.metrics import STORAGE_OPERATION_DURATION

    h = STORAGE_OPERATION_DURATION.labels(plugin, op, status, "false")
    return next(s.value for s in h.collect()[0].samples if s.name.endswith("_count"))


async def test_operations_are_timed_as_upstreams_storage_operation_duration(tmp_path: Path):
    env = Env(tmp_path)
    plugin = env.plugin.name
    counts = lambda: [  # noqa: E731
        _storage_ops(plugin, "volume_mount", "success"),
        _storage_ops(plugin, "volume_mount", "fail-unknown"),
        _storage_ops(plugin, "volume_unmount", "success"),
        _storage_ops(plugin, "volume_unmount", "fail-unknown"),
    ]
    before = counts()
    env.plugin.fail["bad"] = "no such configmap"
    env.mgr.add_pod(mkpod("a", fake("v"), fake("bad")))
    await env.settle()
    env.plugin.fail["v"] = "device busy"
    env.mgr.remove_pod("a")
    await env.settle()
    got = [a - b for a, b in zip(counts(), before, strict=True)]
    # v mounted, bad failed; both torn down and both failing (a failed set-up may
    # have left something: it is torn down too)
    assert got == [1, 1, 0, 2]
    assert sorted(env.plugin.tear_downs) == [("a", "bad"), ("a", "v")]
