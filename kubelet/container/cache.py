"""The pod status cache (pkg/kubelet/container/cache.go).

The PLEG writes the latest PodStatus of each pod with the time of the relist
that produced it; pod workers read it with get_newer_than(uid, t), which
returns at once when the cache holds data at least as new as t and otherwise
waits, without polling, until a set() for that pod or a global timestamp
update passes t.

`Cache` is what the kubelet uses; a Rust-indexed version is planned (issue 5).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass
from typing import Any

from kubelet.container.runtime import empty_status


@dataclass
class Entry:
    status: Any
    error: BaseException | None
    modified: float


class ReferenceCache:
    """Pure-Python reference: per-UID waiter lists and a heap of global-time waiters."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._timestamp: float | None = None  # global: every pod is at least this fresh
        self._waiters: dict[str, list[tuple[float, int, asyncio.Future[Entry]]]] = {}
        self._global_heap: list[tuple[float, int, str]] = []
        self._ids = itertools.count()

    def get(self, uid: str) -> tuple[Any, BaseException | None]:
        e = self._get(uid)
        return e.status, e.error

    def _get(self, uid: str) -> Entry:
        e = self._entries.get(uid)
        if e is None:
            return Entry(empty_status(uid), None, 0.0)
        return e

    def _fresh(self, uid: str, min_time: float) -> Entry | None:
        e = self._entries.get(uid)
        if e is not None and e.modified >= min_time:
            return e
        if self._timestamp is not None and self._timestamp >= min_time:
            return e if e is not None else Entry(empty_status(uid), None, self._timestamp)
        return None

    async def get_newer_than(self, uid: str, min_time: float) -> tuple[Any, BaseException | None]:
        e = self._fresh(uid, min_time)
        if e is not None:
            return e.status, e.error
        fut: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        wid = next(self._ids)
        self._waiters.setdefault(uid, []).append((min_time, wid, fut))
        heapq.heappush(self._global_heap, (min_time, wid, uid))
        try:
            got = await fut
        finally:
            self._forget(uid, wid)
        return got.status, got.error

    def _forget(self, uid: str, wid: int) -> None:
        lst = self._waiters.get(uid)
        if lst is not None:
            lst[:] = [w for w in lst if w[1] != wid]
            if not lst:
                del self._waiters[uid]

    def set(self, uid: str, status: Any, error: BaseException | None, timestamp: float) -> None:
        e = Entry(status, error, timestamp)
        self._entries[uid] = e
        for min_time, _wid, fut in list(self._waiters.get(uid, ())):
            if timestamp >= min_time and not fut.done():
                fut.set_result(e)

    def delete(self, uid: str) -> None:
        self._entries.pop(uid, None)

    def update_time(self, timestamp: float) -> None:
        self._timestamp = timestamp
        heap = self._global_heap
        while heap and heap[0][0] <= timestamp:
            _min, wid, uid = heapq.heappop(heap)
            for _m, w, fut in self._waiters.get(uid, ()):
                if w == wid and not fut.done():
                    fut.set_result(self._fresh(uid, _min) or self._get(uid))

    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())


# Not native yet (issue 5): every implementation runs this cache for now.
Cache = ReferenceCache
