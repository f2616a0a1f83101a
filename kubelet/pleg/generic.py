"""The generic PLEG: periodic relist of the runtime (pkg/kubelet/pleg/generic.go).

Each relist takes the raw List responses to the relist differ, fetches fresh
status only for the pods that changed, writes them to the pod cache with the
relist's start time, bumps the cache's global time, and sends the events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from kubelet import metrics
from kubelet.container.cache import PodCache
from kubelet.container.runtime import PodStatus
from kubelet.cri.errors import CRIError
from kubelet.pleg.pleg import CONTAINER_CHANGED, CONTAINER_REMOVED, PodLifecycleEvent
from kubelet.util.clock import REAL_CLOCK, Clock


class RelistSource(Protocol):
    """The two raw List calls a relist makes (the CRI runtime service)."""

    async def list_pod_sandbox_raw(self) -> bytes: ...

    async def list_containers_raw(self) -> bytes: ...


class Differ(Protocol):
    """The relist differ (Rust, or its reference): raw List bytes in, events and
    the UIDs of pods that changed out; it keeps the previous snapshot itself."""

    @property
    def running_pods(self) -> int: ...

    @property
    def running_containers(self) -> int: ...

    @property
    def exited_containers(self) -> int: ...

    @property
    def changes(self) -> int:
        """Diffs that produced events; the same while the set of pods is the same."""
        ...

    def diff(
        self, sandboxes: bytes, containers: bytes
    ) -> tuple[Sequence[PodLifecycleEvent], Sequence[str]]: ...

    def pod_ids(self) -> Sequence[str]: ...

    def known(self, uid: str) -> bool: ...


log = logging.getLogger(__name__)

RELIST_THRESHOLD = 180.0  # 3 minutes, as upstream
EVENT_CHANNEL_CAPACITY = 1000
STATUS_CONCURRENCY = 64


class GenericPLEG:
    def __init__(
        self,
        runtime: RelistSource,
        differ: Differ,
        cache: PodCache,
        get_status: Callable[[str], Awaitable[PodStatus]],
        period: float,
        threshold: float = RELIST_THRESHOLD,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.runtime = runtime
        self.differ = differ
        self.cache = cache
        self.get_status = get_status
        self.period = period
        self.threshold = threshold
        self.clock = clock
        self.events: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue(EVENT_CHANNEL_CAPACITY)
        self.last_relist = 0.0  # monotonic time of the last relist start
        self._last_start = 0.0
        self._reinspect: set[str] = set()
        self.relists = 0
        self.dropped = 0

    async def prime(self) -> None:
        """The first relist, before any pod source starts: the cache then holds
        what the runtime runs when the first pods are admitted (a restart
        re-admits running pods; upstream's container manager reads its running
        set from the runtime at start for the same reason). Its events are not
        sent: each pod is synced from its source's first update anyway."""
        try:
            await self.relist(emit=False)
        except CRIError as err:  # the relist loop tries again; admission goes on without
            log.warning("PLEG: the first relist failed, pods are admitted without the "
                        "runtime's view of their containers: %s", err)  # fmt: skip

    async def relist(self, emit: bool = True) -> None:
        start_mono = self.clock.monotonic()
        start = self.clock.time()
        if self._last_start:
            metrics.PLEG_RELIST_INTERVAL.observe(start_mono - self._last_start)
        self._last_start = start_mono
        sandboxes, containers = await asyncio.gather(
            self.runtime.list_pod_sandbox_raw(), self.runtime.list_containers_raw()
        )
        events, changed = self.differ.diff(sandboxes, containers)
        self.last_relist = start_mono
        metrics.PLEG_LAST_SEEN.set(start)
        todo = list(dict.fromkeys([*changed, *self._reinspect]))
        self._reinspect.clear()
        if todo:
            sem = asyncio.Semaphore(STATUS_CONCURRENCY)

            async def one(u: str) -> None:
                if not self.differ.known(u):
                    # Nothing of the pod is left in the runtime: drop its entry, as
                    # upstream's updateCache does, or every pod ever run stays cached.
                    self.cache.delete(u)
                    return
                async with sem:
                    try:
                        status = await self.get_status(u)
                    except Exception as err:  # one pod must not fail the relist
                        # Keep its old status and look again next relist.
                        log.warning("PLEG: failed to inspect pod %s: %s", u, err)
                        self._reinspect.add(u)
                        old, _ = self.cache.get(u)
                        self.cache.set(u, old, err, start)
                        return
                    self.cache.set(u, status, None, start)

            await asyncio.gather(*(one(u) for u in todo))
        self.cache.update_time(start)
        for ev in events if emit else ():
            if ev.type in (CONTAINER_REMOVED, CONTAINER_CHANGED):
                continue  # nothing to sync for these, as upstream
            for _ in range(8):
                if not self.events.full():
                    break
                # One relist can carry thousands of events (a node starting up):
                # let the syncLoop drain the channel before giving up on any.
                await asyncio.sleep(0)
            try:
                self.events.put_nowait(ev)
            except asyncio.QueueFull:
                self.dropped += 1
                metrics.PLEG_DISCARD_EVENTS.inc()
                log.error("PLEG event channel is full, discarding event %s", ev)
        self.relists += 1
        metrics.RUNNING_PODS.set(self.differ.running_pods)
        d = self.differ
        metrics.RUNNING_CONTAINERS.labels("running").set(d.running_containers)
        metrics.RUNNING_CONTAINERS.labels("exited").set(d.exited_containers)
        metrics.PLEG_RELIST_DURATION.observe(self.clock.monotonic() - start_mono)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.relist()
            except Exception as err:  # the PLEG must keep relisting; health tells if it stalls
                log.error("PLEG relist failed: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), self.period)
            except TimeoutError:
                pass

    def healthy(self) -> str | None:
        if not self.last_relist:
            return None  # not started yet: the syncloop check covers a stuck start
        ago = self.clock.monotonic() - self.last_relist
        if ago > self.threshold:
            return f"pleg was last seen active {ago:.0f}s ago; threshold is {self.threshold:.0f}s"
        return None
