"""Pod worker state machine: one sync at a time per pod, kills never lost, grace only shrinks."""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.container.cache import Cache
from kubelet.pod_workers import PodWork, PodWorkers, UpdateType
from kubelet.util.workqueue import WorkQueue


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

    async def sync(self, p: dict[str, Any], status: Any) -> bool:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await self.gate.wait()
        self.syncs.append((p["metadata"]["uid"], p["metadata"]["generation"]))
        self.active -= 1
        return False

    async def terminate(self, p: dict[str, Any], grace: int | None) -> None:
        self.kills.append((p["metadata"]["uid"], grace))

    async def cleanup(self, p: dict[str, Any]) -> None:
        self.cleanups.append(p["metadata"]["uid"])


def workers(r: Recorder, cache: Cache) -> PodWorkers:
    return PodWorkers(r.sync, r.terminate, r.cleanup, cache, WorkQueue(), resync_interval=60)


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
    assert r.cleanups == ["a"] and "a" not in w.states


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
    cache.set("a", object(), None, 5.0)
    await settle()
    assert r.syncs == [("a", 0)]
