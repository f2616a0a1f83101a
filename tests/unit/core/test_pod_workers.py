"""Pod worker state machine: one sync at a time per pod, kills never lost, grace only shrinks."""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.container.cache import Cache
from kubelet.container.runtime import PodStatus, empty_status
from kubelet.pod_workers import (
    PodSyncResult,
    PodWork,
    PodWorkers,
    UpdateType,
    WorkerSync,
    working_pod_counts,
)
from kubelet.util.clock import FakeClock
from kubelet.util.workqueue import ReferenceWorkQueue, WorkQueue


def pod(uid: str, gen: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default", "generation": gen},
        "spec": {},
    }


class Recorder:
    def __init__(self) -> None:
        self.syncs: list[tuple[str, int]] = []
        self.kills: list[tuple[str, int | None]] = []
        self.cleanups: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.active = 0
        self.max_active = 0

        self.result = PodSyncResult()

    async def sync_pod(
        self, update: UpdateType, p: dict[str, Any], status: PodStatus
    ) -> PodSyncResult:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await self.gate.wait()
        self.syncs.append((p["metadata"]["uid"], p["metadata"]["generation"]))
        self.active -= 1
        return self.result

    async def sync_terminating_pod(self, p: dict[str, Any], grace: int | None) -> None:
        self.kills.append((p["metadata"]["uid"], grace))

    async def sync_terminated_pod(self, p: dict[str, Any]) -> None:
        self.cleanups.append(p["metadata"]["uid"])


def workers(r: Recorder, cache: Cache) -> PodWorkers:
    return PodWorkers(r, cache, WorkQueue(), resync_interval=60)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_newer_update_replaces_pending_and_kill_is_never_lost() -> None:
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)  # every status is fresh: no waiting on the PLEG here
    w = workers(r, cache)
    r.gate.clear()
    w.update_pod(PodWork(pod("a", 1), UpdateType.CREATE))
    await settle()  # sync of gen 1 is in progress
    w.update_pod(PodWork(pod("a", 2), UpdateType.UPDATE))
    w.update_pod(PodWork(pod("a", 3), UpdateType.UPDATE))  # replaces gen 2
    w.update_pod(PodWork(pod("a", 3), UpdateType.KILL, grace=30))
    w.update_pod(PodWork(pod("a", 4), UpdateType.UPDATE))  # must not cancel the kill
    w.update_pod(PodWork(pod("a", 4), UpdateType.KILL, grace=60))  # grace cannot grow
    w.update_pod(PodWork(pod("a", 4), UpdateType.KILL, grace=5, removed=True))  # but can shrink
    r.gate.set()
    await settle()
    assert r.syncs == [("a", 1)]  # gens 2..4 never synced: a kill came first
    assert r.kills == [("a", 5)]
    assert r.cleanups == ["a"] and w.states.should_pod_be_finished("a")
    assert w.sync_known_pods(set()) == {} and "a" not in w.states  # purged by housekeeping


async def test_a_uid_added_again_while_stopping_restarts_only_through_housekeeping() -> None:
    """A static pod's manifest removed and written back (same UID): nothing but
    housekeeping (SyncKnownPods, then a new addition) starts it again, however
    many syncs (PLEG events, resync ticks) ask for it meanwhile."""
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))
    await settle()
    w.update_pod(PodWork(pod("a"), UpdateType.KILL, removed=True))
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))  # written back while stopping
    await settle()
    assert w.states.is_pod_known_terminated("a") and w.states.should_pod_be_finished("a")
    for t in (UpdateType.SYNC, UpdateType.UPDATE, UpdateType.CREATE):
        w.update_pod(PodWork(pod("a"), t))  # the old container's death, a resync tick
    await settle()
    assert r.syncs == [("a", 0)]  # the finished UID never re-entered a worker
    assert w.sync_known_pods({"a"}) == {}  # purged: housekeeping restarts it
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))
    await settle()
    assert r.syncs == [("a", 0), ("a", 0)]
    assert w.sync_known_pods({"a"}) == {"a": WorkerSync("sync", False, False)}


async def test_a_finished_pod_still_wanted_is_kept_and_counted_terminated() -> None:
    """Finished without being added again (say, refused on the way back): the
    worker stays, so no sync can start the UID, until the source lets it go."""
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    w.update_pod(PodWork(static_pod("s"), UpdateType.CREATE))
    w.update_pod(PodWork(pod("b"), UpdateType.CREATE))
    await settle()
    w.update_pod(PodWork(static_pod("s"), UpdateType.KILL, removed=True))
    await settle()
    known = w.sync_known_pods({"s", "b"})
    assert known == {
        "s": WorkerSync("terminated", False, True),
        "b": WorkerSync("sync", False, False),
    }
    counts = working_pod_counts(known.values(), runtime_only=2)
    assert counts == {
        ("terminated", "desired", "true"): 1, ("sync", "desired", ""): 1,
        ("terminating", "runtime_only", "unknown"): 2,
    }  # fmt: skip
    w.update_pod(PodWork(static_pod("s"), UpdateType.SYNC))
    await settle()
    assert [u for u, _ in r.syncs] == ["s", "b"]
    assert set(w.sync_known_pods({"b"})) == {"b"}  # the source let it go: purged


async def test_pods_sync_concurrently_but_each_sequentially() -> None:
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    r.gate.clear()
    for u in ("a", "b", "c"):
        w.update_pod(PodWork(pod(u), UpdateType.CREATE))
    await settle()
    assert r.active == 3  # three pods at once
    w.update_pod(PodWork(pod("a", 1), UpdateType.UPDATE))
    await settle()
    assert r.active == 3  # a's second sync waits for its first
    r.gate.set()
    await settle()
    assert sorted(r.syncs) == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]


async def test_worker_waits_for_a_newer_cache_status() -> None:
    r, cache = Recorder(), Cache()
    w = workers(r, cache)
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))
    await settle()
    assert r.syncs == []  # no relist has happened yet
    cache.set("a", empty_status("a"), None, 5.0)
    await settle()
    assert r.syncs == [("a", 0)]


async def test_result_decides_when_the_pod_is_looked_at_again() -> None:
    """A back-off deadline in the result brings the retry forward; an error
    without one waits the worker's back-off; success waits the resync period."""
    r, cache, clock = Recorder(), Cache(), FakeClock()
    cache.update_time(1e18)
    q = ReferenceWorkQueue(clock=clock.monotonic)
    w = PodWorkers(r, cache, q, resync_interval=60, backoff_period=10, clock=clock)

    async def due_after(seconds: float) -> list[str]:
        clock.step(seconds)
        return q.get_work()

    r.result = PodSyncResult(error="CrashLoopBackOff", retry_after=2.5)
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))
    await settle()
    assert await due_after(2.4) == [] and await due_after(0.2) == ["a"]

    r.result = PodSyncResult(error="runtime down")
    w.update_pod(PodWork(pod("a"), UpdateType.SYNC))
    await settle()
    assert await due_after(9.9) == [] and await due_after(0.2) == ["a"]

    r.result = PodSyncResult(error="long back-off", retry_after=300)
    w.update_pod(PodWork(pod("a"), UpdateType.SYNC))
    await settle()
    assert await due_after(10.1) == ["a"]  # never later than the worker's own back-off

    r.result = PodSyncResult()
    w.update_pod(PodWork(pod("a"), UpdateType.SYNC))
    await settle()
    assert await due_after(59) == [] and await due_after(31) == ["a"]  # 60 s + up to 50 %

    r.result = PodSyncResult(terminal=True)
    w.update_pod(PodWork(pod("a"), UpdateType.SYNC))
    await settle()
    assert r.kills == [("a", None)]  # a finished pod is torn down at once
    assert await due_after(1000) == []


def static_pod(u: str, name: str = "web-n1") -> dict[str, Any]:
    p = pod(u)
    p["metadata"].update(name=name, annotations={"kubernetes.io/config.source": "file"})
    return p


async def test_a_static_pod_waits_until_the_one_of_its_name_is_gone() -> None:
    # An edited manifest is a new pod (new UID) with the same full name: it
    # starts only once the old one has been stopped and forgotten, so the old
    # one keeps its grace period and its mirror pod meanwhile (allowPodStart).
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    w.update_pod(PodWork(static_pod("old"), UpdateType.CREATE))
    await settle()
    w.update_pod(PodWork(static_pod("new"), UpdateType.CREATE))
    w.update_pod(PodWork(static_pod("other", name="db-n1"), UpdateType.CREATE))
    await settle()
    assert [u for u, _ in r.syncs] == ["old", "other"]
    w.update_pod(PodWork(static_pod("old"), UpdateType.KILL, removed=True))
    await settle()
    assert r.kills == [("old", None)] and r.cleanups == ["old"]
    assert [u for u, _ in r.syncs] == ["old", "other", "new"]


async def test_a_waiting_static_pod_that_is_killed_lets_the_next_one_start() -> None:
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    for u in ("a", "b", "c"):
        w.update_pod(PodWork(static_pod(u), UpdateType.CREATE))
    await settle()
    assert [u for u, _ in r.syncs] == ["a"]
    # b is edited away before it ever ran; then a goes: c runs, b never did.
    w.update_pod(PodWork(static_pod("b"), UpdateType.KILL, removed=True))
    w.update_pod(PodWork(static_pod("a"), UpdateType.KILL, removed=True))
    await settle()
    assert [u for u, _ in r.syncs] == ["a", "c"]


async def test_kills_are_not_held_back_by_the_concurrency_bound() -> None:
    """Stopping pods waits out grace periods: a node shutdown stops them all at
    once, not max_concurrency at a time (syncs stay bounded)."""

    class SlowKills(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.stopping = 0
            self.release = asyncio.Event()

        async def sync_terminating_pod(self, p: dict[str, Any], grace: int | None) -> None:
            self.stopping += 1
            await self.release.wait()

    r, cache = SlowKills(), Cache()
    cache.update_time(1e18)
    w = PodWorkers(r, cache, WorkQueue(), resync_interval=60, max_concurrency=2)
    for i in range(10):
        w.update_pod(PodWork(pod(f"p{i}"), UpdateType.KILL, grace=30))
    await settle()
    assert r.stopping == 10
    r.release.set()
    await settle()
    assert all(await asyncio.gather(*(w.wait_terminated(f"p{i}", 1) for i in range(10))))
    r.gate.clear()
    for i in range(10, 14):
        w.update_pod(PodWork(pod(f"p{i}"), UpdateType.CREATE))
    await settle()
    assert r.active == 2  # syncs are still bounded
    r.gate.set()


async def test_a_stopping_static_pod_keeps_its_mirror_until_it_has_stopped() -> None:
    """Node e2e 'mirror pod termination should satisfy grace period when static
    pod is deleted': housekeeping leaves the mirror pod of a deleted manifest
    while its pod is still stopping (IsPodForMirrorPodTerminatingByFullName)."""

    class SlowKill(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()

        async def sync_terminating_pod(self, p: dict[str, Any], grace: int | None) -> None:
            await self.release.wait()
            await super().sync_terminating_pod(p, grace)

    r, cache = SlowKill(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    fn = "web-n1_default"
    w.update_pod(PodWork(static_pod("old"), UpdateType.CREATE))
    await settle()
    assert not w.is_pod_for_mirror_pod_terminating_by_full_name(fn)  # running
    w.update_pod(PodWork(static_pod("old"), UpdateType.KILL, removed=True))
    await settle()
    assert w.is_pod_for_mirror_pod_terminating_by_full_name(fn)
    assert not w.is_pod_for_mirror_pod_terminating_by_full_name("other-n1_default")
    r.release.set()
    await settle()
    assert r.kills == [("old", None)]
    assert not w.is_pod_for_mirror_pod_terminating_by_full_name(fn)


class FailingOnce(Recorder):
    async def sync_terminating_pod(self, p: dict[str, Any], grace: int | None) -> None:
        await super().sync_terminating_pod(p, grace)
        if len(self.kills) == 1:
            raise RuntimeError("unprepare failed")


async def test_a_kill_that_failed_is_retried_when_the_work_queue_brings_the_pod_back() -> None:
    """A failed SyncTerminatingPod (a runtime error, a DRA driver refusing to
    unprepare) goes back on the work queue; the sync the loop then sends for
    it runs the kill again, never a sync."""
    r, cache = FailingOnce(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    w.update_pod(PodWork(pod("a"), UpdateType.CREATE))
    await settle()
    w.update_pod(PodWork(pod("a"), UpdateType.KILL, grace=0))
    await settle()
    assert len(r.kills) == 1 and not w.states.is_pod_known_terminated("a")
    w.update_pod(PodWork(pod("a"), UpdateType.SYNC))  # the work queue's retry
    await settle()
    assert len(r.kills) == 2 and w.states.is_pod_known_terminated("a")
    assert len(r.syncs) == 1  # only the first, before the kill


async def test_a_refreshed_pod_is_used_by_the_next_sync_without_asking_for_one() -> None:
    """RECONCILE (only the API status moved): the worker drops the copy it held
    for the newer one, syncs nothing for it, and a stopping pod keeps its own."""
    r, cache = Recorder(), Cache()
    cache.update_time(1e18)
    w = workers(r, cache)
    w.update_pod(PodWork(pod("a", 1), UpdateType.CREATE))
    await settle()
    assert r.syncs == [("a", 1)]
    newer = pod("a", 2)
    w.refresh_pod(newer)
    await settle()
    assert r.syncs == [("a", 1)]  # no sync of its own
    state = w.states.get("a")
    assert state is not None and state.pod is newer
    w.update_pod(PodWork(state.pod, UpdateType.SYNC))
    await settle()
    assert r.syncs == [("a", 1), ("a", 2)]
    # Stopping: the kill's copy stays what the final status answers.
    w.update_pod(PodWork(pod("a", 3), UpdateType.KILL, grace=1))
    await settle()
    w.refresh_pod(pod("a", 4))
    state = w.states.get("a")
    assert state is not None and state.pod["metadata"]["generation"] == 3
    w.refresh_pod(pod("unknown", 1))  # no worker: nothing made
    assert w.states.get("unknown") is None
