"""The pod status cache (pkg/kubelet/container/cache.go).

The PLEG writes the latest PodStatus of each pod with the time of the relist
that produced it; pod workers read it with get_newer_than(uid, t), which
returns at once when the cache holds data at least as new as t and otherwise
waits, without polling, until a set() for that pod or a global timestamp
update passes t.

`NativeCache` keeps entries and the waiter index in Rust (kubelet_native.
PodCacheCore): a set() or a global time update hands back only the ids of the
waiters it satisfies, so Python touches nothing for pods nobody waits on.
`ReferenceCache` is the pure-Python reference with the same interface.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass
from typing import Protocol

import kubelet
from kubelet.container.runtime import PodStatus, empty_status


class PodCache(Protocol):
    """What the PLEG writes and pod workers read (Cache upstream)."""

    def get(self, uid: str) -> tuple[PodStatus, BaseException | None]: ...

    async def get_newer_than(
        self, uid: str, min_time: float
    ) -> tuple[PodStatus, BaseException | None]: ...

    def set(
        self, uid: str, status: PodStatus, error: BaseException | None, timestamp: float
    ) -> None: ...

    def delete(self, uid: str) -> None: ...

    def update_time(self, timestamp: float) -> None: ...


@dataclass
class Entry:
    status: PodStatus
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

    def get(self, uid: str) -> tuple[PodStatus, BaseException | None]:
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

    async def get_newer_than(
        self, uid: str, min_time: float
    ) -> tuple[PodStatus, BaseException | None]:
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

    def set(
        self, uid: str, status: PodStatus, error: BaseException | None, timestamp: float
    ) -> None:
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

    def __len__(self) -> int:
        return len(self._entries)


class NativeCache:
    """The Rust store and waiter index; one asyncio future per waiting worker here."""

    def __init__(self) -> None:
        import kubelet_native

        self._core = kubelet_native.PodCacheCore()
        self._futs: dict[int, asyncio.Future[tuple[PodStatus, BaseException | None]]] = {}

    def get(self, uid: str) -> tuple[PodStatus, BaseException | None]:
        e = self._core.get(uid)
        if e is None:
            return empty_status(uid), None
        return e[0], e[1]  # type: ignore[return-value]  # the core keeps what set() gave it

    def _fresh(self, uid: str, min_time: float) -> tuple[PodStatus, BaseException | None] | None:
        r = self._core.fresh(uid, min_time)
        if r is None:
            return None
        if not r[0]:
            return empty_status(uid), None
        return r[1], r[2]  # type: ignore[return-value]  # the core keeps what set() gave it

    async def get_newer_than(
        self, uid: str, min_time: float
    ) -> tuple[PodStatus, BaseException | None]:
        got = self._fresh(uid, min_time)
        if got is not None:
            return got
        fut: asyncio.Future[tuple[PodStatus, BaseException | None]]
        fut = asyncio.get_running_loop().create_future()
        wid = self._core.add_waiter(uid, min_time)
        self._futs[wid] = fut
        try:
            return await fut
        finally:
            del self._futs[wid]
            self._core.remove_waiter(wid)  # a no-op when it was woken

    def set(
        self, uid: str, status: PodStatus, error: BaseException | None, timestamp: float
    ) -> None:
        for wid in self._core.set(uid, status, error, timestamp):
            fut = self._futs.get(wid)
            if fut is not None and not fut.done():
                fut.set_result((status, error))

    def delete(self, uid: str) -> None:
        self._core.delete(uid)

    def update_time(self, timestamp: float) -> None:
        for wid, uid in self._core.update_time(timestamp):
            fut = self._futs.get(wid)
            if fut is not None and not fut.done():
                fut.set_result(self.get(uid))

    def waiting(self) -> int:
        return self._core.waiting()

    def __len__(self) -> int:
        return len(self._core)


Cache: type[ReferenceCache] | type[NativeCache] = (
    NativeCache if kubelet.__impl__ == "native" else ReferenceCache
)
