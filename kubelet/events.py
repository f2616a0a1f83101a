"""Event recording (client-go tools/record as the kubelet uses it).

Events go through the event client (eventRecordQPS/eventBurst) from a
bounded queue, so recording never blocks a pod worker. As upstream, a
repeated event (same object, type, reason and message) bumps the count of the
existing Event with a PATCH instead of creating a new one; more than 10
similar events within 10 minutes are aggregated into one "(combined from
similar events)" Event; and a per-object token bucket (burst 25, one token
per 5 minutes) drops event spam.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kubelet.client.rest import APIClient, APIError
from kubelet.types import ObjectReference
from kubelet.util.gotime import meta_now

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

AGGREGATE_MAX_EVENTS = 10
AGGREGATE_WINDOW = 600.0
SPAM_BURST = 25
SPAM_REFILL = 300.0  # seconds per token
QUEUE_SIZE = 1000
# Each of the three per-object caches keeps at most this many entries, least
# recently used out first (client-go's maxLruCacheEntries): a node that churns
# pods forever must not keep a record of every pod it ever ran.
CACHE_ENTRIES = 4096

K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    def __init__(self, size: int | None = None) -> None:
        self.size = CACHE_ENTRIES if size is None else size
        self._d: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._d.get(key)
        if value is not None:
            self._d.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def pop(self, key: K) -> None:
        self._d.pop(key, None)

    def __len__(self) -> int:
        return len(self._d)


class Recorder(Protocol):
    """What components emit events through (record.EventRecorder)."""

    def event(self, ref: ObjectReference, etype: str, reason: str, message: str) -> None: ...


class AnnotatedRecorder(Recorder, Protocol):
    """A recorder that can also put annotations on the Event (AnnotatedEventf):
    eviction says there what was starved and who used it."""

    def annotated_event(
        self, ref: ObjectReference, annotations: Mapping[str, str], etype: str, reason: str,
        message: str,
    ) -> None: ...  # fmt: skip


# What the sender takes from the queue: the object, type, reason, message and
# the Event's annotations (empty: none).
_Queued = tuple[ObjectReference, str, str, str, Mapping[str, str]]

_NO_ANNOTATIONS: Mapping[str, str] = {}


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: str


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


class EventRecorder:
    def __init__(self, node_name: str, client: APIClient | None = None) -> None:
        self.node_name = node_name
        self.client = client
        self.queue: asyncio.Queue[_Queued] = asyncio.Queue(QUEUE_SIZE)
        self._seen: _LRU[tuple[str, ...], _Seen] = _LRU()
        self._aggregate: _LRU[tuple[str, ...], _Aggregate] = _LRU()
        self._spam: _LRU[str, tuple[float, float]] = _LRU()
        self.dropped = 0
        self.sent = 0

    def event(self, ref: ObjectReference, etype: str, reason: str, message: str) -> None:
        """Record an event about `ref` (kind, name, namespace, uid[, apiVersion])."""
        self.annotated_event(ref, _NO_ANNOTATIONS, etype, reason, message)

    def annotated_event(
        self, ref: ObjectReference, annotations: Mapping[str, str], etype: str, reason: str,
        message: str,
    ) -> None:  # fmt: skip
        """An event whose Event object carries `annotations`."""
        log.info(
            "Event %s %s/%s %s: %s",
            etype,
            ref.get("namespace", ""),
            ref.get("name", ""),
            reason,
            message,
        )
        if self.client is None:
            return  # standalone: there is nowhere to send events
        try:
            self.queue.put_nowait((ref, etype, reason, message, annotations))
        except asyncio.QueueFull:
            self.dropped += 1

    def _allow(self, ref: ObjectReference) -> bool:
        key = f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}/{ref.get('uid')}"
        now = time.monotonic()
        tokens, last = self._spam.get(key) or (float(SPAM_BURST), now)
        tokens = min(SPAM_BURST, tokens + (now - last) / SPAM_REFILL)
        if tokens < 1:
            self._spam.put(key, (tokens, now))
            return False
        self._spam.put(key, (tokens - 1, now))
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            getter = asyncio.ensure_future(self.queue.get())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                stopper.cancel()
                return
            stopper.cancel()
            ref, etype, reason, message, annotations = getter.result()
            try:
                await self._send(ref, etype, reason, message, annotations)
            except Exception as err:  # events are best effort; the sender goes on
                log.debug("dropping event %s %s: %s", reason, ref.get("name"), err)

    async def _send(
        self, ref: ObjectReference, etype: str, reason: str, message: str,
        annotations: Mapping[str, str],
    ) -> None:  # fmt: skip
        assert self.client is not None
        if not self._allow(ref):
            self.dropped += 1
            return
        ns = ref.get("namespace") or "default"
        obj_key = (ref.get("kind", ""), ns, ref.get("name", ""), ref.get("uid", ""), etype, reason)
        agg = self._aggregate.get(obj_key)
        if agg is None:
            agg = _Aggregate()
            self._aggregate.put(obj_key, agg)
        now = time.monotonic()
        if now - agg.last > AGGREGATE_WINDOW:
            agg.messages.clear()
        agg.last = now
        agg.messages.add(message)
        if len(agg.messages) > AGGREGATE_MAX_EVENTS:
            message = f"(combined from similar events): {message}"
            key = (*obj_key, "aggregate")
        else:
            key = (*obj_key, message)
        seen = self._seen.get(key)
        ts = meta_now()
        if seen is not None:
            patch = {"count": seen.count + 1, "lastTimestamp": ts, "message": message}
            try:
                await self.client.patch(
                    f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}", patch
                )
                seen.count += 1
                self.sent += 1
                return
            except APIError as err:
                if not err.not_found:
                    raise
                self._seen.pop(key)
        name = f"{ref.get('name', 'unknown')}.{time.time_ns():x}"
        involved = {k: v for k, v in ref.items() if v}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "namespace": ns,
                **({"annotations": dict(annotations)} if annotations else {}),
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "type": etype,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
        }
        await self.client.create(f"/api/v1/namespaces/{ns}/events", event)
        self._seen.put(key, _Seen(name, ns, 1, ts))
        self.sent += 1
