"""computePodActions and sync against the fake CRI runtime."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubelet.cri import errors
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.util.clock import FakeClock
from tests.unit.core.helpers import RecordingRecorder, c, manager, pod, status


@pytest.fixture
def rm(tmp_path) -> tuple[RuntimeManager, FakeRuntimeService, FakeImageService]:  # type: ignore[no-untyped-def]
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    return manager(tmp_path, rt, img, crash_backoff=Backoff(10, 300)), rt, img


async def test_new_pod_creates_sandbox_and_starts_all(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, _ = rm
    p = pod([c("a"), c("b")])
    a = m.compute_pod_actions(p, await status(m, p))
    assert a.create_sandbox and a.attempt == 0 and a.containers_to_start == [0, 1]
    res = await m.sync_pod(p, await status(m, p))
    assert res.ok and len(rt.called("start_container")) == 2
    st = await status(m, p)
    assert len(st.sandboxes) == 1 and st.ips and [x.state for x in st.containers] == ["running"] * 2
    # a second sync has nothing to do
    a = m.compute_pod_actions(p, st)
    assert not a.create_sandbox and not a.kill_pod and not a.containers_to_start


async def test_a_sync_with_nothing_to_start_builds_no_sandbox_config(
    rm, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The steady state of a running pod: its periodic syncs ask nothing of DNS
    (and so draw no MissingClusterDNS warnings) and make no runtime call that
    creates anything."""
    m, rt, _ = rm
    asked: list[str] = []
    real = m.helper.get_pod_dns
    monkeypatch.setattr(m.helper, "get_pod_dns", lambda p: asked.append("dns") or real(p))
    p = pod([c("a")])
    assert (await m.sync_pod(p, await status(m, p))).ok
    assert asked == ["dns"]
    for _ in range(3):
        assert (await m.sync_pod(p, await status(m, p))).ok
    assert asked == ["dns"]
    assert len(rt.called("run_pod_sandbox")) == 1 and len(rt.called("create_container")) == 1
    # A crash brings the config back: the restart needs it.
    rt.set_exited((await status(m, p)).containers[0].id, 1)
    assert (await m.sync_pod(p, await status(m, p))).ok
    assert asked == ["dns", "dns"] and len(rt.called("create_container")) == 2


async def test_restart_policies(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, _ = rm
    for policy, code, restart in (
        ("Always", 0, True),
        ("OnFailure", 0, False),
        ("OnFailure", 1, True),
        ("Never", 1, False),
    ):
        p = pod([c("x")], restartPolicy=policy)
        await m.sync_pod(p, await status(m, p))
        cid = (await status(m, p)).containers[0].id
        rt.set_exited(cid, code)
        a = m.compute_pod_actions(p, await status(m, p))
        assert (a.containers_to_start == [0]) is restart, (policy, code)
        if not restart:
            assert a.kill_pod  # nothing left to run: the sandbox goes
        await m.kill_pod(p, await status(m, p), 0, remove=True)


async def test_spec_change_kills_only_that_container(rm) -> None:  # type: ignore[no-untyped-def]
    m, _rt, _ = rm
    p = pod([c("a"), c("b")])
    await m.sync_pod(p, await status(m, p))
    p["spec"]["containers"][1]["command"] = ["sh", "-c", "new"]
    st = await status(m, p)
    a = m.compute_pod_actions(p, st)
    killed = [cs.name for cs, _ in a.containers_to_kill.values()]
    assert killed == ["b"] and a.containers_to_start == [1]


async def test_init_containers_run_in_order(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, _ = rm
    p = pod([c("app")], initContainers=[c("i1"), c("i2")])
    await m.sync_pod(p, await status(m, p))
    st = await status(m, p)
    assert [x.name for x in st.containers] == ["i1"]
    assert m.compute_pod_actions(p, st).next_init_container is None  # i1 still running
    rt.set_exited(st.containers[0].id, 0)
    await m.sync_pod(p, await status(m, p))
    st = await status(m, p)
    assert sorted(x.name for x in st.containers) == ["i1", "i2"]
    rt.set_exited(st.find("i2").id, 0)  # type: ignore[union-attr]
    a = m.compute_pod_actions(p, await status(m, p))
    assert a.next_init_container is None and a.containers_to_start == [0]


async def test_failed_init_with_never_kills_the_pod(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, _ = rm
    p = pod([c("app")], initContainers=[c("i1")], restartPolicy="Never")
    await m.sync_pod(p, await status(m, p))
    rt.set_exited((await status(m, p)).containers[0].id, 2)
    assert m.compute_pod_actions(p, await status(m, p)).kill_pod


async def test_crash_loop_backoff_and_image_errors(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, img = rm
    p = pod([c("x")])
    await m.sync_pod(p, await status(m, p))
    rt.set_exited((await status(m, p)).containers[0].id, 1)
    assert (await m.sync_pod(p, await status(m, p))).ok  # first restart is immediate
    rt.set_exited((await status(m, p)).containers[0].id, 1)
    res = await m.sync_pod(p, await status(m, p))
    reason, msg = m.waiting[p["metadata"]["uid"]]["x"]
    assert reason == "CrashLoopBackOff" and msg.startswith(
        "back-off 10s restarting failed container=x pod=p-n1_default("
    )
    assert res.retry_after is not None and 0 < res.retry_after <= 10

    q = pod([c("y", "example.com/app:missing")])
    res = await m.sync_pod(q, await status(m, q))
    assert m.waiting[q["metadata"]["uid"]]["y"][0] == "ErrImagePull"
    await m.sync_pod(q, await status(m, q))
    assert m.waiting[q["metadata"]["uid"]]["y"][0] == "ImagePullBackOff"
    assert len(img.called("pull_image")) == 1  # the back-off held the second pull


async def test_sandbox_failure_is_reported_not_raised(rm) -> None:  # type: ignore[no-untyped-def]
    m, rt, _ = rm
    rt.inject_error("run_pod_sandbox", errors.UnavailableError("RunPodSandbox", "runtime down"))
    p = pod([c("a")])
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and "runtime down" in res.errors[0]
    assert (await m.sync_pod(p, await status(m, p))).ok  # the next try works


async def test_container_events_point_at_their_container(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    rec = RecordingRecorder()
    m = manager(tmp_path, rt, img, recorder=rec)
    p = pod([c("app")], initContainers=[c("setup", image="busybox:other")])
    await m.sync_pod(p, await status(m, p))  # pulls and starts the init container
    paths = {(reason, ref.get("fieldPath")) for ref, _, reason, _ in rec.events}
    assert ("Pulling", "spec.initContainers{setup}") in paths
    assert ("Started", "spec.initContainers{setup}") in paths
    rt.set_exited((await status(m, p)).find("setup").id, 0)  # type: ignore[union-attr]
    await m.sync_pod(p, await status(m, p))
    paths = {(reason, ref.get("fieldPath")) for ref, _, reason, _ in rec.events}
    assert ("Started", "spec.containers{app}") in paths
    assert all(
        ref["kind"] == "Pod" and ref["uid"] == p["metadata"]["uid"] for ref, *_ in rec.events
    )


async def crash_twice(m: RuntimeManager, rt: FakeRuntimeService, p: dict[str, Any], ago: float):  # type: ignore[no-untyped-def]
    """Run p's container, let it fail, restart it, and let it fail again `ago`
    seconds before now: it is then in its first 10 s CrashLoopBackOff."""
    await m.sync_pod(p, await status(m, p))
    rt.set_exited((await status(m, p)).containers[0].id, 1)
    assert (await m.sync_pod(p, await status(m, p))).ok  # first restart is immediate
    cid = (await status(m, p)).containers[0].id
    rt.set_exited(cid, 1)
    rt.containers[cid].finished_at -= int(ago * 1e9)
    return await status(m, p)


async def test_concurrent_syncs_keep_their_own_backoff_deadlines(rm) -> None:  # type: ignore[no-untyped-def]
    """Many pods sync at once through one RuntimeManager: each result must carry
    its own pod's back-off. (A deadline kept on the manager itself gave the
    fresh crash the other pod's 2 s, and could hand a healthy pod a deadline.)"""
    m, rt, _ = rm
    fresh = pod([c("x")])
    fresh["metadata"]["uid"] = "fresh"
    older = pod([c("x")])
    older["metadata"]["uid"] = "older"
    healthy = pod([c("x")])
    healthy["metadata"]["uid"] = "healthy"
    st_fresh = await crash_twice(m, rt, fresh, ago=0)
    st_older = await crash_twice(m, rt, older, ago=8)
    await m.sync_pod(healthy, await status(m, healthy))
    r_fresh, r_older, r_healthy = await asyncio.gather(
        m.sync_pod(fresh, st_fresh),
        m.sync_pod(older, st_older),
        m.sync_pod(healthy, await status(m, healthy)),
    )
    assert r_fresh.retry_after is not None and 9 < r_fresh.retry_after <= 10
    assert r_older.retry_after is not None and 1 < r_older.retry_after <= 2.1
    assert r_healthy.ok and r_healthy.retry_after is None


async def test_image_pull_backoff_doubles_from_each_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ImagePullBackOff: after each failed pull, wait 10 s, 20 s, 40 s ... counted
    from that failure; between pulls the sync says how long is left."""
    clock = FakeClock()
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    m = manager(tmp_path, rt, img, image_backoff=Backoff(10, 300, clock=clock.time))
    p = pod([c("y", "example.com/app:missing")])
    u = p["metadata"]["uid"]

    async def sync() -> tuple[str, float | None, int]:
        res = await m.sync_pod(p, await status(m, p))
        return m.waiting[u]["y"][0], res.retry_after, len(img.called("pull_image"))

    assert await sync() == ("ErrImagePull", None, 1)
    for wait, pulls in ((10, 2), (20, 3), (40, 4)):
        clock.step(wait - 1)
        reason, retry, n = await sync()
        assert (reason, n) == ("ImagePullBackOff", pulls - 1)
        assert retry is not None and abs(retry - 1) < 1e-6  # 1 s left of this back-off
        clock.step(1.01)
        assert (await sync())[::2] == ("ErrImagePull", pulls)


async def test_a_failed_probe_kills_with_its_own_grace_period(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A liveness probe's terminationGracePeriodSeconds governs the kill it
    causes, not the pod's 600 s; a pod being deleted keeps its own."""
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    why: dict[str, str] = {}
    m = manager(tmp_path, rt, img, must_restart=lambda cid: why.get(cid))
    probe = {"exec": {"command": ["false"]}, "terminationGracePeriodSeconds": 3}
    p = pod([c("a", livenessProbe=probe)], terminationGracePeriodSeconds=600)
    await m.sync_pod(p, await status(m, p))
    cid = (await status(m, p)).containers[0].id
    why[cid] = "failed liveness probe"
    a = m.compute_pod_actions(p, await status(m, p))
    assert a.kill_grace == {cid: 3} and cid in a.containers_to_kill
    await m.sync_pod(p, await status(m, p))
    assert rt.called("stop_container")[-1][-1] == 3
    st = await status(m, p)
    cid2 = next(x.id for x in st.containers if x.state == "running")
    why[cid2] = "failed liveness probe"
    assert m.compute_pod_actions(p, st).kill_grace == {cid2: 3}
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    assert m.compute_pod_actions(p, st).kill_grace == {}


@pytest.mark.parametrize("host_users", [None, True])
async def test_host_user_pods_run_in_the_host_user_namespace(tmp_path, host_users) -> None:  # type: ignore[no-untyped-def]
    """hostUsers unset or true (UserNamespacesSupport on, the v1.34 default):
    the pod runs, and sandbox and containers ask for the NODE user namespace
    (upstream's GetOrCreateUserNamespaceMappings)."""
    from kubelet.cri.api import api_pb2 as pb

    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    m = manager(tmp_path, rt, img)
    extra = {} if host_users is None else {"hostUsers": host_users}
    p = pod([c("a")], **extra)
    res = await m.sync_pod(p, await status(m, p))
    assert res.ok, res.errors
    ((sb_cfg, _handler),) = rt.called("run_pod_sandbox")
    assert sb_cfg.linux.security_context.namespace_options.userns_options.mode == pb.NODE
    ((_sid, cfg, _sb),) = rt.called("create_container")
    assert cfg.linux.security_context.namespace_options.userns_options.mode == pb.NODE


def _userns_manager(tmp_path, rt: FakeRuntimeService):  # type: ignore[no-untyped-def]
    """A real user namespace manager over 4 slots from 65536, whose handler
    support comes from the fake runtime's Status through RuntimeState."""
    from kubelet.runtime_state import RuntimeState
    from kubelet.userns.idrange import IDRange
    from kubelet.userns.userns_manager import UsernsManager

    state = RuntimeState(rt, FakeImageService([]), FakeClock())
    return state, UsernsManager(str(tmp_path), IDRange(65536, 4 * 65536, 65536), state)


def _handler(name: str, userns: bool):  # type: ignore[no-untyped-def]
    from kubelet.cri.api import api_pb2 as pb

    return pb.RuntimeHandler(name=name, features=pb.RuntimeHandlerFeatures(user_namespaces=userns))


async def test_host_users_false_runs_with_the_pods_own_mappings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """hostUsers: false: the sandbox and every container ask for mode POD with
    the pod's range (uid and gid, container 0 -> the host range, 65536 long),
    every mount carries the same mappings (idmapped by the runtime), and the
    range is written to the pod's `userns` file."""
    import json

    from kubelet.cri.api import api_pb2 as pb

    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    rt.runtime_handlers = [_handler("", True)]
    state, userns = _userns_manager(tmp_path, rt)
    await state.check()
    m = manager(tmp_path, rt, img, userns=userns)
    p = pod([c("a"), c("b")], hostUsers=False)
    res = await m.sync_pod(p, await status(m, p))
    assert res.ok, res.errors
    host_id = userns.allocated(p["metadata"]["uid"])
    assert host_id is not None and host_id % 65536 == 0 and 65536 <= host_id < 5 * 65536
    want = pb.IDMapping(host_id=host_id, container_id=0, length=65536)
    ((sb_cfg, _h),) = rt.called("run_pod_sandbox")
    ns = sb_cfg.linux.security_context.namespace_options.userns_options
    assert ns == pb.UserNamespace(mode=pb.POD, uids=[want], gids=[want])
    created = rt.called("create_container")
    assert len(created) == 2
    for _sid, cfg, _sb in created:
        assert cfg.linux.security_context.namespace_options.userns_options == ns
        assert cfg.mounts  # /etc/hosts at least
        for mnt in cfg.mounts:
            assert list(mnt.uidMappings) == [want] and list(mnt.gidMappings) == [want]
    doc = json.loads((tmp_path / "pods" / p["metadata"]["uid"] / "userns").read_bytes())
    assert doc["uidMappings"] == [{"hostId": host_id, "containerId": 0, "length": 65536}]


@pytest.mark.parametrize(
    ("handlers", "message"),
    [
        ([], "can't set `spec.hostUsers: false`, runtime does not support user namespaces"),
        (
            [("", False)],
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces",
        ),
    ],
)
async def test_host_users_false_on_a_runtime_without_user_namespaces_is_refused(
    tmp_path, handlers, message
) -> None:  # type: ignore[no-untyped-def]
    """No sandbox is made (running it in the host's user namespace would defeat
    the point), no range is taken, and the event says upstream's reason."""
    rec = RecordingRecorder()
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    rt.runtime_handlers = [_handler(n, u) for n, u in handlers]
    state, userns = _userns_manager(tmp_path, rt)
    await state.check()
    m = manager(tmp_path, rt, img, recorder=rec, userns=userns)
    p = pod([c("a")], hostUsers=False)
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and not rt.called("run_pod_sandbox")
    assert userns.free_slots == 4
    assert [(r, msg) for _ref, _t, r, msg in rec.events] == [
        ("FailedCreatePodSandBox", f"Failed to create pod sandbox: {message}")
    ]


async def test_host_users_false_without_a_manager_is_never_run_in_the_host_namespace(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    m = manager(tmp_path, rt, img)
    p = pod([c("a")], hostUsers=False)
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and not rt.called("run_pod_sandbox")
    assert "no user namespace mappings" in res.errors[0]


async def test_host_users_set_with_the_gate_off_is_upstreams_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    m = manager(tmp_path, rt, img, node=NodeSettings(user_namespaces_support=False))
    p = pod([c("a")], hostUsers=True)
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and "UserNamespacesSupport" in res.errors[0]
    # Unset with the gate off: no user-namespace option at all, as upstream.
    q = pod([c("b")])
    q["metadata"]["uid"] = "other"
    assert (await m.sync_pod(q, await status(m, q))).ok
    ((sb_cfg, _h),) = rt.called("run_pod_sandbox")
    assert not sb_cfg.linux.security_context.namespace_options.HasField("userns_options")


async def test_a_sandbox_config_that_cannot_be_made_is_told_with_the_bare_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The node e2e FQDN spec waits for an event that starts 'Failed to create pod
    sandbox: failed to construct FQDN': upstream's createPodSandbox gives the
    event the error itself, and no sandbox is made."""
    rt, img = FakeRuntimeService(), FakeImageService(["busybox:1.36"])
    rec = RecordingRecorder()
    m = manager(tmp_path, rt, img, recorder=rec)
    p = pod([c("a")], subdomain="t", setHostnameAsFQDN=True)
    p["metadata"]["name"] = "hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-1"
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and res.errors[0].startswith("Failed to generate sandbox config for pod")
    msgs = [msg for _, _, reason, msg in rec.events if reason == "FailedCreatePodSandBox"]
    assert msgs and msgs[0].startswith(
        "Failed to create pod sandbox: failed to construct FQDN from pod hostname and "
        "cluster domain, FQDN "
    ), msgs
    assert not rt.called("run_pod_sandbox")
