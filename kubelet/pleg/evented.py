"""The evented PLEG (pkg/kubelet/pleg/evented.go, behind the EventedPLEG gate).

Container events from the runtime's GetContainerEvents stream update the pod
cache and become PLEG events as they happen; the generic relist keeps running
with a long period as a safety net. When the stream keeps failing, the
generic PLEG takes over fully at its normal period; a runtime that does not
serve GetContainerEvents at all (containerd 1.6 answers UNIMPLEMENTED) hands
over at once, with one log line saying so, rather than after five retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from kubelet.container.cache import PodCache
from kubelet.container.runtime import PodStatus
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.metrics import PLEG_DISCARD_EVENTS
from kubelet.pleg.generic import GenericPLEG
from kubelet.pleg.metrics import (
    EVENTED_PLEG_CONN,
    EVENTED_PLEG_CONN_ERR,
    EVENTED_PLEG_CONN_LATENCY,
)
from kubelet.pleg.pleg import (
    CONTAINER_DIED,
    CONTAINER_REMOVED,
    CONTAINER_STARTED,
    PodLifecycleEvent,
)

log = logging.getLogger(__name__)

MAX_STREAM_RETRIES = 5  # eventedPlegMaxStreamRetries
FALLBACK_RELIST_PERIOD = 300.0  # the generic relist's period while events flow
GLOBAL_CACHE_PERIOD = 1.0
RETRY_DELAY = 1.0  # seconds before the n-th retry: n times this, at most 5 times

_TYPES = {
    pb.CONTAINER_STARTED_EVENT: CONTAINER_STARTED,
    pb.CONTAINER_STOPPED_EVENT: CONTAINER_DIED,
    pb.CONTAINER_DELETED_EVENT: CONTAINER_REMOVED,
}


class EventStatuses(Protocol):
    """The pod status a container event carries (the runtime manager)."""

    async def status_from_event(self, ev: pb.ContainerEventResponse) -> PodStatus: ...


class EventedPLEG:
    def __init__(
        self,
        runtime: RuntimeService,
        runtime_manager: EventStatuses,
        generic: GenericPLEG,
        cache: PodCache,
    ) -> None:
        self.runtime = runtime
        self.runtime_manager = runtime_manager
        self.generic = generic
        self.cache = cache
        self.normal_period = generic.period
        self.events_seen = 0
        self.fell_back = False
        self.last_event = 0.0

    async def _consume(self) -> None:
        async for ev in self.runtime.get_container_events(EVENTED_PLEG_CONN.inc):
            self.events_seen += 1
            self.last_event = time.monotonic()
            if ev.created_at:  # ns since the epoch; a runtime that leaves it out is not timed
                EVENTED_PLEG_CONN_LATENCY.observe(max(0.0, time.time() - ev.created_at / 1e9))
            uid = ev.pod_sandbox_status.metadata.uid
            if not uid:
                continue
            if ev.container_event_type == pb.CONTAINER_DELETED_EVENT and not ev.containers_statuses:
                # The last container is gone: ask the runtime for what is left.
                status = await self.generic.get_status(uid)
            else:
                status = await self.runtime_manager.status_from_event(ev)
            if not status.sandboxes and not status.containers:
                # Nothing of the pod is left: forget it (evented.go deletes the
                # entry when its sandbox is deleted), or it stays cached forever.
                self.cache.delete(uid)
            else:
                self.cache.set(uid, status, None, time.time())
            kind = _TYPES.get(ev.container_event_type)
            if kind is not None:
                try:
                    self.generic.events.put_nowait(PodLifecycleEvent(uid, kind, ev.container_id))
                except asyncio.QueueFull:
                    PLEG_DISCARD_EVENTS.inc()
                    log.error("PLEG event channel is full, discarding event for pod %s", uid)

    async def _global_time(self, stop: asyncio.Event) -> None:
        # Pods with no events are as fresh as the stream: let their workers proceed.
        while not stop.is_set():
            if not self.fell_back:
                self.cache.update_time(time.time())
            try:
                await asyncio.wait_for(stop.wait(), GLOBAL_CACHE_PERIOD)
            except TimeoutError:
                pass

    async def run(self, stop: asyncio.Event) -> None:
        self.generic.period = FALLBACK_RELIST_PERIOD
        ticker = asyncio.create_task(self._global_time(stop))
        failures = 0
        try:
            while not stop.is_set() and failures < MAX_STREAM_RETRIES:
                consumer = asyncio.ensure_future(self._consume())
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait(
                    {consumer, stopper}, return_when=asyncio.FIRST_COMPLETED
                )
                stopper.cancel()
                if consumer not in done:
                    consumer.cancel()
                    await asyncio.gather(consumer, return_exceptions=True)
                    return
                err = consumer.exception()
                EVENTED_PLEG_CONN_ERR.inc()  # the stream ended (an EOF too), as upstream counts
                if isinstance(err, errors.UnimplementedError):
                    log.warning(
                        "Evented PLEG: the runtime does not serve GetContainerEvents (%s); "
                        "the generic PLEG relists every %ss instead", err, self.normal_period,
                    )  # fmt: skip
                    break
                failures += 1
                log.warning(
                    "Evented PLEG: container event stream ended (%s), retry %d/%d",
                    err, failures, MAX_STREAM_RETRIES,
                )  # fmt: skip
                # A relist right away covers whatever happened while the stream was down.
                try:
                    await self.generic.relist()
                except Exception as relist_err:  # the stream's retry loop goes on
                    log.warning("relist after stream failure failed: %s", relist_err)
                await asyncio.sleep(min(RETRY_DELAY * failures, 5 * RETRY_DELAY))
            if not stop.is_set():
                if failures >= MAX_STREAM_RETRIES:
                    log.error(
                        "Evented PLEG: falling back to the generic PLEG (relist every %ss)",
                        self.normal_period,
                    )
                self.fell_back = True
                self.generic.period = self.normal_period
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
