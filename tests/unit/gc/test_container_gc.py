"""Container GC on the CRI fake with a fixed clock: every upstream rule."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService
from kubelet.kuberuntime.kuberuntime_gc import ContainerGC, ContainerGCError, GCPolicy

from .fakes import Clock, add_container, add_sandbox

NOW = 1_000_000.0


def gc(
    rt: FakeRuntimeService,
    tmp_path: Path,
    gone: set[str] = frozenset(),  # type: ignore[assignment]
    **kw: object,
) -> ContainerGC:
    policy = kw.pop("policy", None)
    return ContainerGC(
        rt,
        lambda uid: uid not in gone,
        str(tmp_path / "pods"),
        policy,  # type: ignore[arg-type]
        clock=Clock(NOW),
        **kw,  # type: ignore[arg-type]
    )


def removed(rt: FakeRuntimeService) -> list[str]:
    return [a[0] for a in rt.called("remove_container")]


async def test_keeps_the_newest_dead_instance_per_container_and_removes_oldest_first(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", NOW - 1000)
    old = await add_container(rt, sid, "app", NOW - 900)
    mid = await add_container(rt, sid, "app", NOW - 800)
    new = await add_container(rt, sid, "app", NOW - 700)
    run = await add_container(rt, sid, "app", NOW - 600, state=pb.CONTAINER_RUNNING)
    other = await add_container(rt, sid, "side", NOW - 850)
    res = await gc(rt, tmp_path).garbage_collect()
    assert removed(rt) == [old, mid]  # oldest first
    assert res.containers == [old, mid]
    assert set(rt.containers) == {new, run, other}
    assert res.sandboxes == []  # ready, and it holds containers


async def test_max_per_pod_container_zero_and_unlimited(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", NOW - 1000)
    ids = [await add_container(rt, sid, "app", NOW - 900 + i) for i in range(3)]
    await gc(rt, tmp_path, policy=GCPolicy(max_per_pod_container=-1)).garbage_collect()
    assert removed(rt) == []
    await gc(rt, tmp_path, policy=GCPolicy(max_per_pod_container=0)).garbage_collect()
    assert removed(rt) == ids


async def test_node_wide_limit_leaves_an_equal_share_then_the_newest(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    dead: dict[str, list[str]] = {}
    for i, uid in enumerate(["a", "b", "c"]):
        sid = await add_sandbox(rt, uid, NOW - 5000)
        dead[uid] = [await add_container(rt, sid, "app", NOW - 4000 + 10 * j + i) for j in range(3)]
    # 9 dead, limit 3: one per (pod, container) is the share, which meets the limit.
    policy = GCPolicy(max_per_pod_container=-1, max_containers=3)
    await gc(rt, tmp_path, policy=policy).garbage_collect()
    assert set(rt.containers) == {dead[u][-1] for u in "abc"}
    # Limit 1 with 3 groups: the share (min 1) is not enough, the oldest go across groups.
    await gc(rt, tmp_path, policy=GCPolicy(max_containers=1)).garbage_collect()
    assert set(rt.containers) == {dead["c"][-1]}  # c's newest is the newest of all


async def test_min_age_protects_young_dead_containers(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", NOW - 1000)
    old = await add_container(rt, sid, "app", NOW - 500)
    young = [await add_container(rt, sid, "app", NOW - 30 + i) for i in range(2)]
    await gc(rt, tmp_path, policy=GCPolicy(min_age=60)).garbage_collect()
    # The young ones are not counted: the old one is the newest evictable, and stays.
    assert removed(rt) == []
    await gc(rt, tmp_path, policy=GCPolicy(min_age=20)).garbage_collect()
    assert removed(rt) == [old, young[0]]


async def test_containers_and_sandboxes_of_a_deleted_pod_go_once_sources_are_ready(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "gone", NOW - 1000, ready=False)
    c1 = await add_container(rt, sid, "app", NOW - 900)
    c2 = await add_container(rt, sid, "app", NOW - 800)
    keep_sid = await add_sandbox(rt, "live", NOW - 1000)
    keep = await add_container(rt, keep_sid, "app", NOW - 900)
    ready = [False]
    g = gc(rt, tmp_path, gone={"gone"}, sources_ready=lambda: ready[0])
    res = await g.garbage_collect()
    assert res.containers == [c1]  # per-container limit only: the newest stays
    assert res.sandboxes == []  # it still holds c2
    ready[0] = True
    res = await g.garbage_collect()
    assert res.containers == [c2]
    assert res.sandboxes == [sid]  # emptied in this same pass
    assert rt.called("stop_pod_sandbox") == [(sid,)]
    assert set(rt.containers) == {keep} and set(rt.sandboxes) == {keep_sid}


async def test_ready_sandbox_of_a_deleted_pod_and_the_newest_of_a_live_pod_stay(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    gone_ready = await add_sandbox(rt, "gone", NOW - 100)
    gone_old = await add_sandbox(rt, "gone", NOW - 900, ready=False)
    live_old = await add_sandbox(rt, "live", NOW - 900, ready=False)
    live_mid = await add_sandbox(rt, "live", NOW - 800, ready=False)
    live_new = await add_sandbox(rt, "live", NOW - 700, ready=False)
    busy = await add_sandbox(rt, "busy", NOW - 900, ready=False)
    busy_new = await add_sandbox(rt, "busy", NOW - 800, ready=False)
    await add_container(rt, busy, "app", NOW - 850)  # the only dead instance: kept
    res = await gc(rt, tmp_path, gone={"gone"}).garbage_collect()
    assert res.sandboxes == [gone_old, live_old, live_mid]  # oldest first
    assert set(rt.sandboxes) == {gone_ready, live_new, busy, busy_new}


async def test_unknown_containers_are_stopped_with_their_grace_before_removal(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "gone", NOW - 1000)
    cid = await add_container(rt, sid, "app", NOW - 900, state=pb.CONTAINER_UNKNOWN)
    rt.containers[cid].annotations["io.kubernetes.pod.terminationGracePeriod"] = "30"
    await gc(rt, tmp_path, gone={"gone"}).garbage_collect()
    assert rt.called("stop_container") == [(cid, 30)]
    assert removed(rt) == [cid]


async def test_a_removed_container_takes_its_log_files_with_it(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", NOW - 1000)
    logs = tmp_path / "pods" / "ns_pod-u1_u1" / "app"
    logs.mkdir(parents=True)
    old = await add_container(rt, sid, "app", NOW - 900, log_path=str(logs / "0.log"))
    await add_container(rt, sid, "app", NOW - 800, log_path=str(logs / "1.log"))
    for name in ("0.log", "0.log.20250101-000000.gz", "0.log.20250101-000100", "1.log", "10.log"):
        (logs / name).write_text("x")
    await gc(rt, tmp_path).garbage_collect()
    assert removed(rt) == [old]
    # "10.log" starts with "1", not with "0.log": it stays, like 1.log.
    assert sorted(os.listdir(logs)) == ["1.log", "10.log"]


async def test_log_dirs_of_pods_that_no_longer_exist_go_once_sources_are_ready(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    base = tmp_path / "pods"
    for d in ("ns_a_live-uid", "kube-system_b_gone-uid"):
        (base / d / "c").mkdir(parents=True)
        (base / d / "c" / "0.log").write_text("x")
    ready = [False]
    g = gc(rt, tmp_path, gone={"gone-uid"}, sources_ready=lambda: ready[0])
    assert (await g.garbage_collect()).log_dirs == []
    ready[0] = True
    assert (await g.garbage_collect()).log_dirs == [str(base / "kube-system_b_gone-uid")]
    assert os.listdir(base) == ["ns_a_live-uid"]


async def test_a_missing_pod_logs_dir_is_not_an_error(tmp_path: Path) -> None:
    assert (await gc(FakeRuntimeService(), tmp_path).garbage_collect()).log_dirs == []


async def test_one_list_of_each_per_pass_and_no_per_container_calls(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    for i in range(50):
        sid = await add_sandbox(rt, f"u{i}", NOW - 1000)
        await add_container(rt, sid, "app", NOW - 900, state=pb.CONTAINER_RUNNING)
        await add_container(rt, sid, "app", NOW - 950)
    rt.calls.clear()
    await gc(rt, tmp_path).garbage_collect()
    assert sorted(m for m, _ in rt.calls) == ["list_containers", "list_pod_sandbox"]


async def test_evict_non_deleted_pods_removes_terminated_pods_content(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "done", NOW - 1000, ready=False)
    cid = await add_container(rt, sid, "app", NOW - 900)
    g = gc(rt, tmp_path, pod_terminated=lambda uid: uid == "done")
    assert (await g.garbage_collect()).containers == []
    res = await g.garbage_collect(evict_non_deleted_pods=True)
    assert (res.containers, res.sandboxes) == ([cid], [sid])


async def test_a_failed_removal_is_logged_and_the_pass_goes_on(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "gone", NOW - 1000, ready=False)
    c1 = await add_container(rt, sid, "a", NOW - 900)
    c2 = await add_container(rt, sid, "b", NOW - 800)
    rt.inject_error("remove_container", errors.CRIError("RemoveContainer", "busy"))
    res = await gc(rt, tmp_path, gone={"gone"}).garbage_collect()
    assert removed(rt) == [c1, c2]
    assert res.containers == [c2]
    assert res.sandboxes == []  # c1 is still in it


async def test_list_failures_raise_after_the_other_steps_and_run_records_an_event(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    (tmp_path / "pods" / "ns_p_gone").mkdir(parents=True)
    rt.inject_error("list_containers", errors.UnavailableError("ListContainers", "down"))
    with pytest.raises(ContainerGCError, match="failed to list containers"):
        await gc(rt, tmp_path, gone={"gone"}).garbage_collect()
    assert not (tmp_path / "pods" / "ns_p_gone").exists()  # the log dir step still ran

    events: list[tuple[str, str, str]] = []
    rt.inject_error("list_pod_sandbox", errors.UnavailableError("ListPodSandbox", "down"))
    stop = asyncio.Event()
    g = gc(rt, tmp_path, node_event=lambda *e: events.append(e), period=3600)
    task = asyncio.create_task(g.run(stop))
    for _ in range(100):
        if events:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert events == [
        ("Warning", "ContainerGCFailed", "failed to list pod sandboxes: ListPodSandbox: down")
    ]


async def test_label_reads_are_cached_and_the_log_dir_listing_reused(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", NOW - 1000)
    old = await add_container(rt, sid, "app", NOW - 900)
    base = tmp_path / "pods"
    (base / "ns_a_gone").mkdir(parents=True)
    past = 1_600_000_000
    os.utime(base, (past, past))
    gone: set[str] = set()
    g = gc(rt, tmp_path, gone=gone)
    await g.garbage_collect()
    assert list(g._keys) == [old] and g._log_dirs is not None
    new = await add_container(rt, sid, "app", NOW - 800)
    gone.add("gone")
    res = await g.garbage_collect()
    assert res.containers == [old] and list(g._keys) == [new]
    assert res.log_dirs == [str(base / "ns_a_gone")]  # from the cached listing
    assert (await g.garbage_collect()).log_dirs == []  # relisted: the removal moved mtime


async def test_a_sandbox_holding_only_a_young_dead_container_stays(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "gone", NOW - 1000, ready=False)
    await add_container(rt, sid, "app", NOW - 10)
    res = await gc(rt, tmp_path, gone={"gone"}, policy=GCPolicy(min_age=60)).garbage_collect()
    assert (res.containers, res.sandboxes) == ([], [])
