"""One sequential worker per pod (pkg/kubelet/pod_workers.go).

Each pod UID gets an asyncio task that runs its syncs one at a time; pods run
concurrently up to a bound. A worker goes sync -> terminating -> terminated:
a newer update replaces a pending one, but a pending kill is never lost and
its grace period can only shrink. Before each sync the worker waits until the
pod cache holds a status newer than its previous sync, so it acts on what the
runtime did, not on what it asked for.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kubelet import metrics
from kubelet.types import Pod, uid

log = logging.getLogger(__name__)


class UpdateType(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    SYNC = "sync"
    KILL = "kill"


@dataclass
class PodWork:
    pod: Pod
    type: UpdateType
    grace: int | None = None  # for KILL: override of the pod's grace period
    removed: bool = False  # the pod is gone from every source: forget it after the kill


@dataclass
class _State:
    pod: Pod
    pending: PodWork | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    terminating: bool = False
    terminated: bool = False
    removed: bool = False
    grace: int | None = None
    last_sync: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)


SyncFn = Callable[[Pod, Any], Awaitable[bool]]  # returns True when the pod is terminal
TerminateFn = Callable[[Pod, int | None], Awaitable[None]]
CleanupFn = Callable[[Pod], Awaitable[None]]


class PodWorkers:
    def __init__(
        self,
        sync: SyncFn,
        terminate: TerminateFn,
        cleanup: CleanupFn,
        cache: Any,
        work_queue: Any,
        resync_interval: float,
        backoff_period: float = 10.0,
        max_concurrency: int = 256,
        on_terminated: Callable[[str], None] | None = None,
    ) -> None:
        self._sync = sync
        self._terminate = terminate
        self._cleanup = cleanup
        self.cache = cache
        self.work_queue = work_queue
        self.resync_interval = resync_interval
        self.backoff_period = backoff_period
        self._sem = asyncio.Semaphore(max_concurrency)
        self.states: dict[str, _State] = {}
        # Told when a pod's containers are all stopped (the status manager may
        # then finish a graceful deletion).
        self.on_terminated = on_terminated

    def update_pod(self, work: PodWork) -> None:
        u = uid(work.pod)
        st = self.states.get(u)
        if st is None:
            # A kill for a pod never synced still runs: after a restart its
            # containers may be running in the runtime.
            st = _State(work.pod)
            self.states[u] = st
            st.task = asyncio.create_task(self._worker(u, st), name=f"pod-worker-{u}")
        if work.type is UpdateType.KILL:
            if not st.terminating:
                st.terminating = True
                st.grace = work.grace
            elif work.grace is not None:
                st.grace = work.grace if st.grace is None else min(st.grace, work.grace)
            st.removed = st.removed or work.removed
        elif st.terminating or st.terminated:
            return  # a pod being killed is not synced again
        else:
            st.pod = work.pod
        st.pending = work
        st.wake.set()

    def could_have_running_containers(self, pod_uid: str) -> bool:
        """False once the worker has stopped every container (or never ran the pod)."""
        st = self.states.get(pod_uid)
        return st is not None and not st.terminated

    def is_terminating(self, pod_uid: str) -> bool:
        st = self.states.get(pod_uid)
        return st is not None and (st.terminating or st.terminated)

    def known(self) -> set[str]:
        return set(self.states)

    async def _worker(self, u: str, st: _State) -> None:
        while True:
            await st.wake.wait()
            st.wake.clear()
            work, st.pending = st.pending, None
            if work is None:
                continue
            status: Any = None
            if not st.terminating:
                # Wait for fresh runtime state before taking a concurrency slot, so
                # pods waiting on the PLEG do not hold back pods that are ready.
                status, _err = await self.cache.get_newer_than(u, st.last_sync)
            async with self._sem:
                if not st.terminating:
                    await self._run_sync(u, st, work, status)
                if st.terminating and not st.terminated:
                    try:
                        await self._terminate(st.pod, st.grace)
                        st.terminated = True
                        if self.on_terminated is not None:
                            self.on_terminated(u)
                    except Exception as err:
                        log.warning("Error killing pod %s, will retry: %s", u, err)
                        self.work_queue.enqueue(u, self.backoff_period)
                        continue
                if st.terminated and st.removed:
                    try:
                        await self._cleanup(st.pod)
                    except Exception:
                        log.exception("cleanup of pod %s failed", u)
                    self.states.pop(u, None)
                    st.done.set()
                    return

    async def _run_sync(self, u: str, st: _State, work: PodWork, status: Any) -> None:
        start = time.perf_counter()
        op = work.type.value if work.type is not UpdateType.KILL else "sync"
        try:
            terminal = await self._sync(st.pod, status)
        except Exception as err:
            # A back-off that ends sooner than the worker's own (CrashLoopBackOff,
            # ImagePullBackOff) says when to look again: restart right on time
            # instead of on the next 10s retry as upstream does.
            delay = getattr(err, "retry_after", None)
            delay = self.backoff_period if delay is None else min(delay, self.backoff_period)
            log.info("Error syncing pod %s, retrying in %.2fs: %s", u, delay, err)
            st.last_sync = time.time()
            self.work_queue.enqueue(u, delay)
            return
        finally:
            metrics.POD_WORKER_DURATION.labels(op).observe(time.perf_counter() - start)
        st.last_sync = time.time()
        if terminal:
            st.terminating = True  # finished pods are torn down (their sandbox stopped)
            return
        # Resync later, with jitter so pods spread out (upstream: up to +50%).
        self.work_queue.enqueue(u, self.resync_interval * (1 + random.random() * 0.5))

    async def stop(self) -> None:
        tasks = [s.task for s in self.states.values() if s.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
