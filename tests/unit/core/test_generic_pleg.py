"""GenericPLEG relists on the CRI fake, both relist differs, both pod caches and a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from kubelet.container.cache import NativeCache, ReferenceCache
from kubelet.container.runtime import PodStatus
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.pleg.differ import NativeRelistDiffer, ReferenceRelistDiffer
from kubelet.pleg.generic import GenericPLEG
from kubelet.pleg.pleg import (
    CONTAINER_CHANGED,
    CONTAINER_DIED,
    CONTAINER_REMOVED,
    CONTAINER_STARTED,
    PodLifecycleEvent,
)
from kubelet.testing.helpers import standalone_runtime_helper
from kubelet.util.clock import FakeClock

DIFFERS = [ReferenceRelistDiffer, NativeRelistDiffer]
CACHES = [ReferenceCache, NativeCache]


# ------------------------------------------------------------------ fakes


class RecordingDiffer:
    """Delegates to a real differ and keeps what it was given and what it answered."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.inputs: list[tuple[bytes, bytes]] = []
        self.outputs: list[tuple[list[PodLifecycleEvent], list[str]]] = []

    @property
    def running_pods(self) -> int:
        return int(self.inner.running_pods)

    @property
    def running_containers(self) -> int:
        return int(self.inner.running_containers)

    @property
    def exited_containers(self) -> int:
        return int(self.inner.exited_containers)

    @property
    def changes(self) -> int:
        return int(self.inner.changes)

    def diff(
        self, sandboxes: bytes, containers: bytes
    ) -> tuple[Sequence[PodLifecycleEvent], Sequence[str]]:
        self.inputs.append((sandboxes, containers))
        events, changed = self.inner.diff(sandboxes, containers)
        self.outputs.append((list(events), list(changed)))
        return events, changed

    def pod_ids(self) -> Sequence[str]:
        return list(self.inner.pod_ids())

    def known(self, uid: str) -> bool:
        return bool(self.inner.known(uid))


class RecordingCache:
    """A real cache that also logs set() and update_time() in call order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.log: list[tuple[Any, ...]] = []

    def get(self, uid: str) -> tuple[Any, BaseException | None]:
        return self.inner.get(uid)  # type: ignore[no-any-return]

    async def get_newer_than(self, uid: str, t: float) -> tuple[Any, BaseException | None]:
        return await self.inner.get_newer_than(uid, t)  # type: ignore[no-any-return]

    def set(self, uid: str, status: Any, error: BaseException | None, ts: float) -> None:
        self.log.append(("set", uid, status, error, ts))
        self.inner.set(uid, status, error, ts)

    def delete(self, uid: str) -> None:
        self.inner.delete(uid)

    def update_time(self, ts: float) -> None:
        self.log.append(("update_time", ts))
        self.inner.update_time(ts)

    def sets(self) -> list[tuple[Any, ...]]:
        return [e for e in self.log if e[0] == "set"]

    def clear(self) -> None:
        self.log.clear()


class StatusFn:
    """get_status: records which pods were asked for, fails for UIDs in `failing`,
    and steps the clock while it works so the write time differs from the start."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.asked: list[str] = []
        self.failing: dict[str, Exception] = {}
        self.version = 0

    async def __call__(self, uid: str) -> PodStatus:
        self.asked.append(uid)
        await asyncio.sleep(0)
        self.clock.step(0.25)
        if uid in self.failing:
            raise self.failing[uid]
        return PodStatus(uid, name=f"v{self.version}")


# ---------------------------------------------------------------- helpers


async def add_pod(rt: FakeRuntimeService, uid: str, containers: Sequence[str] = ("c",)) -> dict:
    """A ready sandbox and running containers labelled as the runtime manager would."""
    sid = await rt.run_pod_sandbox(
        pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=f"pod-{uid}", uid=uid, namespace="default"),
            labels={L.POD_UID: uid},
        )
    )
    ids = {"sandbox": sid}
    for name in containers:
        cid = await rt.create_container(
            sid,
            pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name=name),
                image=pb.ImageSpec(image="busybox:1.36"),
                labels={L.POD_UID: uid, L.CONTAINER_NAME: name},
            ),
            pb.PodSandboxConfig(),
        )
        await rt.start_container(cid)
        ids[name] = cid
    return ids


def drain(q: asyncio.Queue[PodLifecycleEvent]) -> list[PodLifecycleEvent]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def make(
    differ_cls: Any, cache_cls: Any = ReferenceCache, **kw: Any
) -> tuple[GenericPLEG, FakeRuntimeService, RecordingDiffer, RecordingCache, StatusFn, FakeClock]:
    clock = FakeClock()
    clock.step(10)  # monotonic 0.0 means "never relisted" to healthy()
    rt = FakeRuntimeService()
    differ = RecordingDiffer(differ_cls())
    cache = RecordingCache(cache_cls())
    status = StatusFn(clock)
    get_status = kw.pop("get_status", status)
    pleg = GenericPLEG(rt, differ, cache, get_status, period=1.0, clock=clock, **kw)
    return pleg, rt, differ, cache, status, clock


@pytest.fixture(params=DIFFERS, ids=["reference", "native"])
def differ_cls(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(params=CACHES, ids=["refcache", "nativecache"])
def cache_cls(request: pytest.FixtureRequest) -> Any:
    return request.param


# ------------------------------------------------------------------ tests


async def test_relist_hands_the_raw_list_bytes_to_the_differ(differ_cls: Any) -> None:
    pleg, rt, differ, _cache, _status, _clock = make(differ_cls)
    await add_pod(rt, "u1", ["a", "b"])
    await pleg.relist()
    assert differ.inputs == [(await rt.list_pod_sandbox_raw(), await rt.list_containers_raw())]
    sb = pb.ListPodSandboxResponse.FromString(differ.inputs[0][0])
    cs = pb.ListContainersResponse.FromString(differ.inputs[0][1])
    assert len(sb.items) == 1 and len(cs.containers) == 2
    # One raw List of each per relist, unfiltered; never the decoded List calls.
    rt.calls.clear()
    await pleg.relist()
    assert sorted(m for m, _ in rt.calls) == ["list_containers_raw", "list_pod_sandbox_raw"]
    assert all(args == (None,) for _, args in rt.calls)


async def test_changed_pods_are_cached_with_the_relist_start_time(
    differ_cls: Any, cache_cls: Any
) -> None:
    pleg, rt, _differ, cache, status, clock = make(differ_cls, cache_cls)
    await add_pod(rt, "u1")
    await add_pod(rt, "u2")
    start = clock.time()
    await pleg.relist()
    assert clock.time() > start  # the status calls took (fake) time
    assert sorted(status.asked) == ["u1", "u2"]
    sets = {e[1]: e for e in cache.sets()}
    assert set(sets) == {"u1", "u2"}
    for uid, (_, _, st, err, ts) in sets.items():
        assert st.id == uid and err is None
        assert ts == start  # the start, not the time the status came back
    # The global time moves after every pod's entry is written, to the same start.
    assert cache.log[-1] == ("update_time", start)
    assert all(e[0] == "set" for e in cache.log[:-1])
    st, err = cache.get("u1")
    assert st.id == "u1" and st.name == "v0" and err is None
    # A worker waiting for anything newer than the start is answered at once.
    got, _ = await asyncio.wait_for(cache.get_newer_than("u1", start), 1)
    assert got.id == "u1"


async def test_only_changed_pods_are_inspected_and_global_time_still_moves(
    differ_cls: Any,
) -> None:
    pleg, rt, _differ, cache, status, clock = make(differ_cls)
    await add_pod(rt, "u1")
    ids2 = await add_pod(rt, "u2")
    await pleg.relist()
    status.asked.clear()
    cache.clear()

    clock.step(1)
    quiet = clock.time()
    await pleg.relist()
    assert status.asked == [] and cache.sets() == []
    assert cache.log == [("update_time", quiet)]
    # A pod nobody has written since is still fresh to the global time.
    waiter = await asyncio.wait_for(cache.get_newer_than("u1", quiet), 1)
    assert waiter[0].id == "u1"

    clock.step(1)
    rt.set_exited(ids2["c"], 1)
    status.version = 1
    busy = clock.time()
    cache.clear()
    await pleg.relist()
    assert status.asked == ["u2"]
    assert [(e[1], e[4]) for e in cache.sets()] == [("u2", busy)]
    assert cache.get("u2")[0].name == "v1" and cache.get("u1")[0].name == "v0"
    assert pleg.relists == 3


async def test_started_and_died_are_sent_removed_and_changed_are_not(differ_cls: Any) -> None:
    pleg, rt, differ, _cache, status, _clock = make(differ_cls)
    sid = await rt.run_pod_sandbox(
        pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="p", uid="u1", namespace="default"),
            labels={L.POD_UID: "u1"},
        )
    )
    cid = await rt.create_container(
        sid,
        pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c"), labels={L.POD_UID: "u1"}),
        pb.PodSandboxConfig(),
    )
    await pleg.relist()
    # The sandbox starts; the created container is "unknown" -> ContainerChanged, filtered.
    assert PodLifecycleEvent("u1", CONTAINER_CHANGED, cid) in differ.outputs[-1][0]
    assert drain(pleg.events) == [PodLifecycleEvent("u1", CONTAINER_STARTED, sid)]

    await rt.start_container(cid)
    await pleg.relist()
    assert drain(pleg.events) == [PodLifecycleEvent("u1", CONTAINER_STARTED, cid)]

    rt.set_exited(cid, 0)
    await pleg.relist()
    assert drain(pleg.events) == [PodLifecycleEvent("u1", CONTAINER_DIED, cid)]

    status.asked.clear()
    await rt.remove_container(cid)
    await pleg.relist()
    assert differ.outputs[-1][0] == [PodLifecycleEvent("u1", CONTAINER_REMOVED, cid)]
    assert drain(pleg.events) == []
    assert status.asked == ["u1"]  # still a change: the cache must learn it is gone


async def test_status_of_a_gone_pod_from_the_runtime_manager(
    tmp_path: Any, differ_cls: Any
) -> None:
    """get_status is RuntimeManager.get_pod_status: the cache follows the runtime."""
    rt = FakeRuntimeService()
    rm = RuntimeManager(
        rt, FakeImageService(), standalone_runtime_helper(str(tmp_path)), str(tmp_path)
    )
    clock = FakeClock()
    clock.step(1)
    cache = ReferenceCache()
    pleg = GenericPLEG(rt, differ_cls(), cache, rm.get_pod_status, 1.0, clock=clock)
    ids = await add_pod(rt, "u1", ["a"])
    await pleg.relist()
    st, err = cache.get("u1")
    assert err is None and st.name == "pod-u1"
    assert [(c.name, c.state) for c in st.containers] == [("a", "running")]
    assert st.sandboxes[0].ready

    await rt.stop_pod_sandbox(ids["sandbox"])  # kills the container too
    await pleg.relist()
    assert sorted(drain(pleg.events)) == sorted(
        [
            PodLifecycleEvent("u1", CONTAINER_STARTED, ids["sandbox"]),
            PodLifecycleEvent("u1", CONTAINER_STARTED, ids["a"]),
            PodLifecycleEvent("u1", CONTAINER_DIED, ids["sandbox"]),
            PodLifecycleEvent("u1", CONTAINER_DIED, ids["a"]),
        ]
    )
    st, _ = cache.get("u1")
    assert [c.state for c in st.containers] == ["exited"] and not st.sandboxes[0].ready

    await rt.remove_pod_sandbox(ids["sandbox"])
    await pleg.relist()
    st, err = cache.get("u1")
    assert err is None and st.sandboxes == [] and st.containers == []
    assert pleg.differ.running_pods == 0


async def test_pods_gone_from_the_runtime_leave_no_cache_entry(
    tmp_path: Any, differ_cls: Any, cache_cls: Any
) -> None:
    """Churn: every pod that was run and removed is dropped from the cache (a soak
    found one empty entry left per pod ever run)."""
    rt = FakeRuntimeService()
    rm = RuntimeManager(
        rt, FakeImageService(), standalone_runtime_helper(str(tmp_path)), str(tmp_path)
    )
    clock = FakeClock()
    clock.step(1)
    cache = cache_cls()
    pleg = GenericPLEG(rt, differ_cls(), cache, rm.get_pod_status, 1.0, clock=clock)
    pods = {f"u{i}": await add_pod(rt, f"u{i}", ["a", "b"]) for i in range(20)}
    await pleg.relist()
    assert len(cache) == 20
    for n, ids in enumerate(pods.values()):
        await rt.stop_pod_sandbox(ids["sandbox"])
        if n % 2:
            await pleg.relist()  # half seen stopped first, half go in one step
        for cid in (ids["a"], ids["b"]):
            await rt.remove_container(cid)
        await rt.remove_pod_sandbox(ids["sandbox"])
    await add_pod(rt, "kept")
    clock.step(1)
    await pleg.relist()
    assert len(cache) == 1 and cache.get("kept")[0].containers
    # A worker asking about a gone pod still gets an empty status, at once.
    st, err = await asyncio.wait_for(cache.get_newer_than("u3", clock.time() - 1), 1)
    assert st.id == "u3" and st.sandboxes == [] and st.containers == [] and err is None


async def test_failed_inspection_keeps_the_old_status_with_the_error_and_retries(
    tmp_path: Any, differ_cls: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rt = FakeRuntimeService()
    rm = RuntimeManager(
        rt, FakeImageService(), standalone_runtime_helper(str(tmp_path)), str(tmp_path)
    )
    clock = FakeClock()
    clock.step(1)
    cache = RecordingCache(ReferenceCache())
    pleg = GenericPLEG(rt, differ_cls(), cache, rm.get_pod_status, 1.0, clock=clock)
    ids = await add_pod(rt, "u1")
    await add_pod(rt, "u2")
    await pleg.relist()
    old, _ = cache.get("u1")
    assert old.containers[0].state == "running"
    drain(pleg.events)

    # Both pods change; inspecting u1 fails (ContainerStatus is only called by get_status).
    rt.set_exited(ids["c"], 2)
    for c, s in rt.container_sandbox.items():
        if s != ids["sandbox"]:
            rt.set_exited(c, 0)
    boom = errors.UnavailableError("ContainerStatus", "runtime is busy")
    orig = rt.container_status
    failing = {ids["c"]}

    async def flaky(cid: str, verbose: bool = False) -> Any:
        if cid in failing:
            raise boom
        return await orig(cid, verbose)

    rt.container_status = flaky  # type: ignore[method-assign,assignment]
    clock.step(1)
    t2 = clock.time()
    cache.clear()
    with caplog.at_level(logging.WARNING, logger="kubelet.pleg.generic"):
        await pleg.relist()
    st, err = cache.get("u1")
    assert err is boom and st is old  # the previous status, now carrying the error
    assert ("set", "u1", old, boom, t2) in cache.log
    assert cache.get("u2")[0].containers[0].state == "exited"  # unaffected
    assert "failed to inspect pod u1" in caplog.text
    assert len(drain(pleg.events)) == 2  # ContainerDied for both

    # Nothing changes in the runtime, yet u1 (and only u1) is inspected again.
    failing.clear()
    clock.step(1)
    t3 = clock.time()
    cache.clear()
    await pleg.relist()
    assert [(e[1], e[3], e[4]) for e in cache.sets()] == [("u1", None, t3)]
    st, err = cache.get("u1")
    assert err is None and st.containers[0].state == "exited"
    assert st.containers[0].exit_code == 2

    # Once it succeeded it is not looked at again.
    cache.clear()
    await pleg.relist()
    assert cache.sets() == []


async def test_reinspection_repeats_until_the_status_call_succeeds(differ_cls: Any) -> None:
    pleg, rt, _differ, cache, status, _clock = make(differ_cls)
    await add_pod(rt, "u1")
    status.failing["u1"] = RuntimeError("no status")
    for _ in range(3):
        status.asked.clear()
        await pleg.relist()
        assert status.asked == ["u1"]
        assert isinstance(cache.get("u1")[1], RuntimeError)
    del status.failing["u1"]
    status.asked.clear()
    await pleg.relist()
    assert status.asked == ["u1"] and cache.get("u1")[1] is None
    status.asked.clear()
    await pleg.relist()
    assert status.asked == []


async def test_a_full_channel_drops_events_and_counts_them(
    differ_cls: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pleg, rt, _differ, _cache, _status, _clock = make(differ_cls)
    pleg.events = asyncio.Queue(3)
    for i in range(3):
        await add_pod(rt, f"u{i}")  # 2 ContainerStarted each: 6 events
    with caplog.at_level(logging.ERROR, logger="kubelet.pleg.generic"):
        await pleg.relist()
    assert pleg.events.qsize() == 3
    assert pleg.dropped == 3
    assert caplog.text.count("PLEG event channel is full") == 3
    # The first events of the relist are the ones kept (in differ order).
    kept = drain(pleg.events)
    assert [e.pod_uid for e in kept] == ["u0", "u0", "u1"]
    assert pleg.relists == 1  # the relist itself completed


async def test_a_full_channel_yields_so_the_sync_loop_can_drain_it(differ_cls: Any) -> None:
    pleg, rt, _differ, _cache, _status, _clock = make(differ_cls)
    pleg.events = asyncio.Queue(2)
    for i in range(5):
        await add_pod(rt, f"u{i}")
    got: list[PodLifecycleEvent] = []

    async def sync_loop() -> None:
        while True:
            got.append(await pleg.events.get())

    consumer = asyncio.create_task(sync_loop())
    await asyncio.sleep(0)  # the consumer is parked on get()
    try:
        await pleg.relist()
        for _ in range(10):
            await asyncio.sleep(0)
    finally:
        consumer.cancel()
    assert pleg.dropped == 0
    assert len(got) == 10
    assert [e.pod_uid for e in got] == sorted(e.pod_uid for e in got)


async def test_healthy_follows_the_threshold_on_the_fake_clock(differ_cls: Any) -> None:
    pleg, rt, _differ, _cache, _status, clock = make(differ_cls, threshold=180.0)
    assert pleg.healthy() is None  # not started yet
    await add_pod(rt, "u1")
    t0 = clock.monotonic()
    await pleg.relist()  # its status calls take 0.25 s: the age counts from the start
    clock.step(179 - (clock.monotonic() - t0))
    assert pleg.healthy() is None
    clock.step(1)
    assert pleg.healthy() is None  # exactly at the threshold is still fine
    clock.step(1)
    msg = pleg.healthy()
    assert msg is not None and "threshold is 180s" in msg and "181s ago" in msg
    await pleg.relist()  # a new relist makes it healthy again
    assert pleg.healthy() is None


async def test_a_failed_list_does_not_count_as_a_relist(differ_cls: Any) -> None:
    pleg, rt, _differ, _cache, _status, clock = make(differ_cls, threshold=5.0)
    await pleg.relist()
    clock.step(4)
    rt.inject_error("list_containers_raw", errors.UnavailableError("ListContainers", "down"))
    with pytest.raises(errors.UnavailableError):
        await pleg.relist()
    clock.step(2)
    assert pleg.healthy() is not None  # the failed attempt did not refresh the PLEG
    assert pleg.relists == 1


async def test_run_relists_every_period_survives_errors_and_stops(differ_cls: Any) -> None:
    clock = FakeClock()
    clock.step(1)
    rt = FakeRuntimeService()
    pleg = GenericPLEG(rt, differ_cls(), ReferenceCache(), StatusFn(clock), 0.01, clock=clock)
    rt.inject_error("list_pod_sandbox_raw", errors.UnavailableError("ListPodSandbox", "x"), 2)
    await add_pod(rt, "u1")
    stop = asyncio.Event()
    task = asyncio.create_task(pleg.run(stop))
    for _ in range(200):
        if pleg.relists >= 2:
            break
        await asyncio.sleep(0.01)
    assert pleg.relists >= 2  # the two failures did not end the loop
    assert len(rt.called("list_pod_sandbox_raw")) >= 4
    assert PodLifecycleEvent("u1", CONTAINER_STARTED, "sb000001") in drain(pleg.events)
    stop.set()
    await asyncio.wait_for(task, 1)


async def test_run_stops_without_waiting_for_the_period(differ_cls: Any) -> None:
    clock = FakeClock()
    rt = FakeRuntimeService()
    pleg = GenericPLEG(rt, differ_cls(), ReferenceCache(), StatusFn(clock), 3600.0, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(pleg.run(stop))
    for _ in range(100):
        if pleg.relists:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert pleg.relists == 1
