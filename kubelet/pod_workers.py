"""One sequential worker per pod (pkg/kubelet/pod_workers.go).

Each pod UID gets an asyncio task that runs its syncs one at a time; pods run
concurrently up to a bound. A worker goes sync -> terminating -> terminated:
a newer update replaces a pending one, but a pending kill is never lost and
its grace period can only shrink. Before each sync the worker waits until the
pod cache holds a status newer than its previous sync, so it acts on what the
runtime did, not on what it asked for.

A worker that has finished (stopped and cleaned up a pod gone from its
source) keeps its state until housekeeping purges it: no later update for that
UID starts anything. A pod added again with the same UID (a static pod's
manifest removed and written back) is marked to restart; housekeeping purges
the finished worker and starts it again, as a new addition (SyncKnownPods and
HandlePodCleanups upstream). That is the only way a UID runs a second time.

Static pods with the same full name (an edited manifest is a new pod with a
new UID) run one at a time, in the order they came: a new one starts only
once the one before it has been stopped and forgotten, so the old one gets
its whole grace period and its mirror pod stays until then.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kubelet import metrics
from kubelet.container.cache import PodCache
from kubelet.container.runtime import PodStatus
from kubelet.types import Pod, full_name, is_static, uid
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.workqueue import PodWorkQueue

log = logging.getLogger(__name__)


class UpdateType(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    SYNC = "sync"
    KILL = "kill"


@dataclass(slots=True)
class PodWork:
    pod: Pod
    type: UpdateType
    grace: int | None = None  # for KILL: override of the pod's grace period
    removed: bool = False  # the pod is gone from every source: forget it after the kill


@dataclass(frozen=True)
class PodSyncResult:
    """What one sync of a pod tells its worker."""

    # The pod reached Succeeded or Failed: tear it down, never sync it again.
    terminal: bool = False
    # Why the sync did not bring the pod to its spec (it is retried with back-off).
    error: str | None = None
    # Seconds until a back-off that blocked this sync (CrashLoopBackOff,
    # ImagePullBackOff) runs out: the worker looks again right then.
    retry_after: float | None = None


class SyncRequests:
    """Pods that something below the syncLoop wants synced now (a probe result
    changed, its volumes are set up). The loop drains them, as upstream's
    syncLoop reads the probe managers' update channels: whoever asks needs no
    reference to the pod workers."""

    def __init__(self) -> None:
        self._uids: dict[str, None] = {}  # in the order asked, each once
        self._asked = asyncio.Event()

    def request(self, pod_uid: str) -> None:
        self._uids[pod_uid] = None
        self._asked.set()

    async def wait(self) -> None:
        await self._asked.wait()

    def drain(self) -> list[str]:
        out = list(self._uids)
        self._uids.clear()
        self._asked.clear()
        return out


class PodSyncer(Protocol):
    """The pod lifecycle behind the workers (podSyncer in pod_workers.go)."""

    async def sync_pod(self, update: UpdateType, pod: Pod, status: PodStatus) -> PodSyncResult: ...

    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None:
        """Stop every container of the pod within the grace period."""
        ...

    async def sync_terminated_pod(self, pod: Pod) -> None:
        """The pod is gone from every source and stopped: release what it held."""
        ...


@dataclass(frozen=True)
class WorkerSync:
    """Where a known worker is, for housekeeping (PodWorkerSync upstream)."""

    lifecycle: str  # sync, terminating or terminated
    orphan: bool  # its pod is gone from every source
    static: bool


def working_pod_counts(
    workers: Iterable[WorkerSync], runtime_only: int
) -> dict[tuple[str, str, str], int]:
    """kubelet_working_pods by (lifecycle, config, static), counted once per
    housekeeping pass. Pods only the runtime knows are being killed by the
    orphan killer, not by a worker: they are counted as terminating."""
    counts: Counter[tuple[str, str, str]] = Counter(
        (w.lifecycle, "orphan" if w.orphan else "desired", "true" if w.static else "")
        for w in workers
    )
    counts["terminating", "runtime_only", "unknown"] += runtime_only
    return dict(counts)


@dataclass(slots=True)
class _State:
    pod: Pod
    pending: PodWork | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    terminating: bool = False
    terminated: bool = False
    removed: bool = False
    # sync_terminated_pod ran: the UID takes no updates until housekeeping
    # purges it (ShouldPodBeFinished upstream).
    finished: bool = False
    # Added again with the same UID while stopping or finished.
    restart_requested: bool = False
    grace: int | None = None
    last_sync: float = 0.0
    # Set once every container is stopped (a kill's CompletedCh upstream).
    # Made only when someone waits: an Event is most of a kilobyte, and most
    # pods are never waited for.
    stopped: asyncio.Event | None = None


class PodWorkerStates:
    """Where each pod's worker is in its lifecycle (podSyncStatuses upstream).
    The workers write it; others only ask. Built before the workers, so that
    what the workers' syncer needs (the status manager) can ask it too."""

    def __init__(self) -> None:
        self._states: dict[str, _State] = {}

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._states

    def get(self, pod_uid: str) -> _State | None:
        return self._states.get(pod_uid)

    def add(self, pod_uid: str, st: _State) -> None:
        self._states[pod_uid] = st

    def pop(self, pod_uid: str) -> None:
        self._states.pop(pod_uid, None)

    def all(self) -> list[_State]:
        return list(self._states.values())

    def could_have_running_containers(self, pod_uid: str) -> bool:
        """False once the worker has stopped every container (or never ran the pod)."""
        st = self._states.get(pod_uid)
        return st is not None and not st.terminated

    def all_stopped(self, pod_uid: str) -> bool:
        """The pod's containers are all stopped: its API object may be deleted."""
        return not self.could_have_running_containers(pod_uid)

    def is_terminating(self, pod_uid: str) -> bool:
        st = self._states.get(pod_uid)
        return st is not None and (st.terminating or st.terminated)

    def is_pod_known_terminated(self, pod_uid: str) -> bool:
        """Every container of the pod is stopped (IsPodKnownTerminated)."""
        st = self._states.get(pod_uid)
        return st is not None and st.terminated

    def should_pod_be_finished(self, pod_uid: str) -> bool:
        """The pod was stopped and cleaned up (ShouldPodBeFinished)."""
        st = self._states.get(pod_uid)
        return st is not None and st.finished

    def known(self) -> set[str]:
        return set(self._states)


class PodWorkers:
    def __init__(
        self,
        syncer: PodSyncer,
        cache: PodCache,
        work_queue: PodWorkQueue,
        resync_interval: float,
        backoff_period: float = 10.0,
        max_concurrency: int = 256,
        on_terminated: Callable[[str], None] | None = None,
        clock: Clock = REAL_CLOCK,
        states: PodWorkerStates | None = None,
    ) -> None:
        self.syncer = syncer
        self.cache = cache
        self.work_queue = work_queue
        self.resync_interval = resync_interval
        self.backoff_period = backoff_period
        self.clock = clock
        self._sem = asyncio.Semaphore(max_concurrency)
        self.states = states or PodWorkerStates()
        # Bumped whenever a pod gets or loses its worker: housekeeping skips
        # work that depends only on which pods have workers.
        self.generation = 0
        # Static pods by full name: the UID allowed to run, and those waiting.
        self._static_started: dict[str, str] = {}
        self._static_waiting: dict[str, list[str]] = {}
        # Told when a pod's containers are all stopped (the status manager may
        # then finish a graceful deletion).
        self.on_terminated = on_terminated
        # Pods that start only once others have stopped (a critical pod and
        # the pods preempted for it): UID -> (UID, seconds at most) to wait for.
        self._start_after: dict[str, list[tuple[str, float]]] = {}

    def update_pod(self, work: PodWork) -> None:
        u = uid(work.pod)
        st = self.states.get(u)
        if st is not None and st.finished:
            # Nothing restarts a finished UID but housekeeping, once purged.
            st.restart_requested |= work.type is UpdateType.CREATE
            return
        if st is None:
            # A kill for a pod never synced still runs: after a restart its
            # containers may be running in the runtime.
            st = _State(work.pod)
            self.states.add(u, st)
            self.generation += 1
            if is_static(work.pod):
                self._static_waiting.setdefault(full_name(work.pod), []).append(u)
            st.task = asyncio.create_task(self._worker(u, st), name=f"pod-worker-{u}")
        if work.type is UpdateType.KILL:
            # The newest copy of the pod (a deletion bumps its generation): the
            # final status answers it.
            st.pod = work.pod
            if not st.terminating:
                st.terminating = True
                st.grace = work.grace
            elif work.grace is not None:
                st.grace = work.grace if st.grace is None else min(st.grace, work.grace)
            st.removed = st.removed or work.removed
        elif st.terminating or st.terminated:
            # A pod being killed is not synced again; added again with its
            # UID, it restarts once stopped and purged.
            st.restart_requested |= work.type is UpdateType.CREATE
            if st.terminated:
                return
            # Still stopping: the wake-up retries a kill that failed (the work
            # queue's back-off brings a sync for it), never a sync.
        else:
            st.pod = work.pod
        st.pending = work
        st.wake.set()

    def refresh_pod(self, pod: Pod) -> None:
        """A newer copy of a pod whose spec is unchanged (only its API status
        moved): the worker's next sync uses it, as an update would, without
        asking for one; the copy it held is freed (kilobytes per pod)."""
        st = self.states.get(uid(pod))
        if st is not None and not (st.terminating or st.terminated or st.finished):
            st.pod = pod

    def start_after(self, pod_uid: str, others: list[tuple[str, float]]) -> None:
        """The pod's first sync waits until each of `others` (UID, timeout) has
        stopped or its timeout ran out, as killPodNow blocks admission upstream."""
        self._start_after[pod_uid] = others

    async def _wait_before_start(self, u: str) -> None:
        others = self._start_after.pop(u, None)
        if not others:
            return
        done = await asyncio.gather(*(self.wait_terminated(o, t) for o, t in others))
        late = [o for (o, _), ok in zip(others, done, strict=True) if not ok]
        if late:
            log.warning("Pod %s starts though pods it waited for are not stopped yet "
                        "(timeout waiting to kill pod): %s", u, ", ".join(late))  # fmt: skip

    def could_have_running_containers(self, pod_uid: str) -> bool:
        return self.states.could_have_running_containers(pod_uid)

    def is_terminating(self, pod_uid: str) -> bool:
        return self.states.is_terminating(pod_uid)

    async def wait_terminated(self, pod_uid: str, timeout: float) -> bool:
        """Wait until the pod's containers are stopped (True), at most timeout
        seconds (False). A pod without a worker has nothing running."""
        st = self.states.get(pod_uid)
        if st is None or st.terminated:
            return True
        if st.stopped is None:
            st.stopped = asyncio.Event()
        try:
            await asyncio.wait_for(st.stopped.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def known(self) -> set[str]:
        return self.states.known()

    def is_pod_for_mirror_pod_terminating_by_full_name(self, pod_full_name: str) -> bool:
        """Is the static pod that ran under this full name still stopping? Its
        mirror pod then stays until it has stopped, as upstream (a deleted
        manifest's pod is Running in the API for its whole grace period)."""
        u = self._static_started.get(pod_full_name)
        st = self.states.get(u) if u is not None else None
        return st is not None and st.terminating and not st.terminated

    def sync_known_pods(self, desired: set[str]) -> dict[str, WorkerSync]:
        """Workers of pods that no source wants any more are told to stop for
        good; finished workers of such pods, or of pods added again with their
        UID, are forgotten (SyncKnownPods upstream). Returns the workers left:
        a desired pod missing from them is one to restart."""
        out: dict[str, WorkerSync] = {}
        for st in self.states.all():
            u = uid(st.pod)
            orphan = u not in desired
            if st.finished and (orphan or st.restart_requested):
                self.states.pop(u)
                self.generation += 1
                continue
            if orphan and not st.removed:
                self.update_pod(PodWork(st.pod, UpdateType.KILL, removed=True))
            life = "terminated" if st.terminated else "terminating" if st.terminating else "sync"
            out[u] = WorkerSync(life, orphan, is_static(st.pod))
        return out

    async def _worker(self, u: str, st: _State) -> None:
        while True:
            await st.wake.wait()
            st.wake.clear()
            work, st.pending = st.pending, None
            if work is None:
                continue
            if not st.terminating and not self._may_start(u, st):
                # Another static pod of this name still runs: woken when it is gone.
                st.pending = st.pending or work
                continue
            if not st.terminating:
                await self._wait_before_start(u)
            status: PodStatus | None = None
            if not st.terminating:
                # Wait for fresh runtime state before taking a concurrency slot, so
                # pods waiting on the PLEG do not hold back pods that are ready.
                status, _err = await self.cache.get_newer_than(u, st.last_sync)
            if not st.terminating and status is not None:
                async with self._sem:
                    await self._run_sync(u, st, work, status)
            if st.terminating and not st.terminated:
                # Not bounded by the slots: stopping is mostly waiting out grace
                # periods, and a node shutdown or drain stops every pod at once
                # (upstream has no bound either). Measured: 600 pods ignoring
                # SIGTERM with 2 s of grace took 3 rounds of 256.
                try:
                    await self.syncer.sync_terminating_pod(st.pod, st.grace)
                    st.terminated = True
                    if st.stopped is not None:
                        st.stopped.set()
                    if self.on_terminated is not None:
                        self.on_terminated(u)
                except Exception as err:  # a pod that may still run is never given up
                    log.warning("Error killing pod %s, will retry: %s", u, err)
                    self.work_queue.enqueue(u, self.backoff_period)
                    continue
            if st.terminated and st.removed:
                async with self._sem:
                    try:
                        await self.syncer.sync_terminated_pod(st.pod)
                    except Exception:  # housekeeping removes what is left of it
                        log.exception("cleanup of pod %s failed; forgetting it anyway", u)
                st.finished = True  # kept until housekeeping purges it
                self._start_after.pop(u, None)
                self._forget_static(u, st.pod)
                return

    def _may_start(self, u: str, st: _State) -> bool:
        """allowPodStart for static pods: the first of its name still wanted runs."""
        if not is_static(st.pod):
            return True
        name = full_name(st.pod)
        started = self._static_started.get(name)
        if started is not None:
            return started == u
        waiting = self._static_waiting.get(name, [])
        first = next((w for w in waiting if not self.is_terminating(w) and w in self.states), u)
        if first != u:
            return False
        self._static_started[name] = u
        if u in waiting:
            waiting.remove(u)
        return True

    def _forget_static(self, u: str, pod: Pod) -> None:
        """A static pod is gone: the next one of its name may start."""
        if not is_static(pod):
            return
        name = full_name(pod)
        waiting = self._static_waiting.get(name, [])
        if u in waiting:
            waiting.remove(u)
        if self._static_started.get(name) == u:
            del self._static_started[name]
        for w in waiting:
            st = self.states.get(w)
            if st is not None:
                st.wake.set()
        if not waiting:
            self._static_waiting.pop(name, None)

    async def _run_sync(self, u: str, st: _State, work: PodWork, status: PodStatus) -> None:
        start = self.clock.monotonic()
        op = work.type.value if work.type is not UpdateType.KILL else "sync"
        try:
            result = await self.syncer.sync_pod(work.type, st.pod, status)
        except Exception as err:  # the worker retries, and logs it below as the sync's error
            result = PodSyncResult(error=str(err) or repr(err))
        finally:
            metrics.POD_WORKER_DURATION.labels(op).observe(self.clock.monotonic() - start)
        st.last_sync = self.clock.time()
        if result.terminal:
            st.terminating = True  # finished pods are torn down (their sandbox stopped)
            return
        if result.error is not None:
            # A back-off that ends sooner than the worker's own (CrashLoopBackOff,
            # ImagePullBackOff) says when to look again: restart right on time
            # instead of on the next 10s retry as upstream does.
            delay = self.backoff_period
            if result.retry_after is not None:
                delay = min(result.retry_after, delay)
            log.info("Error syncing pod %s, retrying in %.2fs: %s", u, delay, result.error)
            self.work_queue.enqueue(u, delay)
            return
        # Resync later, with jitter so pods spread out (upstream: up to +50%).
        self.work_queue.enqueue(u, self.resync_interval * (1 + random.random() * 0.5))

    async def stop(self) -> None:
        tasks = [s.task for s in self.states.all() if s.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
