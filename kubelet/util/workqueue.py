"""Work queues.

WorkQueue is the kubelet's pod work queue (pkg/kubelet/util/queue): enqueue(key,
delay) sets (overwrites) when a key is due; get_work(now) takes every due key in
time order, ties in enqueue order. A binary heap with lazy deletion keeps both
O(log n), where the Go kubelet scans its whole map every second.

RateLimitingQueue is client-go's rate-limited queue (util/workqueue): a key is
queued once (dirty set), never handed out twice at once (processing set; a key
added while processed comes back after done()), add_after keeps the earliest
time, add_rate_limited backs off exponentially per key up to a cap, forget()
resets it, shut_down() stops adds and lets getters drain. Thread-safe.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import kubelet


class PodWorkQueue(Protocol):
    """The pod work queue as the pod workers and the syncLoop use it."""

    def enqueue(self, key: str, delay: float) -> None: ...

    def get_work(self, now: float | None = None) -> list[str]: ...

    def remove(self, key: str) -> None: ...


class ReferenceWorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._due: dict[str, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0  # ties go out in enqueue order

    def enqueue(self, key: str, delay: float) -> None:
        at = self.clock() + max(0.0, delay)
        self._seq += 1
        self._due[key] = (at, self._seq)
        heapq.heappush(self._heap, (at, self._seq, key))
        # Stale heap entries are skipped on the way out; compact when they dominate.
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(t, q, k) for k, (t, q) in self._due.items()]
            heapq.heapify(self._heap)

    def get_work(self, now: float | None = None) -> list[str]:
        now = self.clock() if now is None else now
        out: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, seq, key = heapq.heappop(heap)
            if self._due.get(key) == (at, seq):
                del self._due[key]
                out.append(key)
        return out

    def remove(self, key: str) -> None:
        self._due.pop(key, None)

    def __len__(self) -> int:
        return len(self._due)


class NativeWorkQueue:
    """The Rust queue (kubelet_native.WorkQueueCore) behind the same interface."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        import kubelet_native

        self.clock = clock
        self._q = kubelet_native.WorkQueueCore()

    def enqueue(self, key: str, delay: float) -> None:
        self._q.enqueue_at(key, self.clock() + max(0.0, delay))

    def get_work(self, now: float | None = None) -> list[str]:
        return list(self._q.get_work(self.clock() if now is None else now))

    def remove(self, key: str) -> None:
        self._q.remove(key)

    def __len__(self) -> int:
        return len(self._q)


WorkQueue: type[ReferenceWorkQueue] | type[NativeWorkQueue] = (
    NativeWorkQueue if kubelet.__impl__ == "native" else ReferenceWorkQueue
)


class ReferenceRateLimitingQueue:
    """Pure-Python reference: one lock and condition over deque, sets and a heap."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        base: float = 0.005,
        cap: float = 1000.0,
    ) -> None:
        if not (base > 0 and cap >= base):
            raise ValueError("need 0 < base <= cap")
        self.clock = clock
        self._base, self._cap = base, cap
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: dict[str, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._failures: dict[str, int] = {}
        self._shutting_down = False
        self._cond = threading.Condition()

    def _add(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)

    def add(self, key: str) -> None:
        with self._cond:
            self._add(key)
            self._cond.notify()

    def _add_after(self, key: str, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self._add(key)
            return
        at = self.clock() + delay
        old = self._waiting.get(key)
        if old is not None and old[0] <= at:
            return  # only ever moves earlier
        self._seq += 1
        self._waiting[key] = (at, self._seq)
        heapq.heappush(self._heap, (at, self._seq, key))
        if len(self._heap) > 2 * len(self._waiting) + 64:
            self._heap = [(t, q, k) for k, (t, q) in self._waiting.items()]
            heapq.heapify(self._heap)

    def add_after(self, key: str, delay: float) -> None:
        with self._cond:
            self._add_after(key, delay)
            self._cond.notify_all()

    def _when(self, key: str) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        try:
            backoff = self._base * 2.0 ** min(n, 1023)
        except OverflowError:
            return self._cap
        return backoff if backoff < self._cap else self._cap

    def when(self, key: str) -> float:
        with self._cond:
            return self._when(key)

    def add_rate_limited(self, key: str) -> None:
        with self._cond:
            self._add_after(key, self._when(key))
            self._cond.notify_all()

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _promote(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, seq, key = heapq.heappop(heap)
            if self._waiting.get(key) == (at, seq):
                del self._waiting[key]
                self._add(key)

    def _get(self) -> str | None:
        self._promote(self.clock())
        if not self._queue:
            return None
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def get_nowait(self) -> str | None:
        with self._cond:
            return self._get()

    def get(self, timeout: float | None = None) -> str | None:
        """Block until a key is ready; None on timeout or when shut down and drained."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                key = self._get()
                if key is not None or self._shutting_down:
                    return key
                waits = []
                if self._heap:
                    waits.append(max(0.0, self._heap[0][0] - self.clock()))
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    waits.append(left)
                self._cond.wait(min(waits) + 1e-4 if waits else None)

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def next_ready(self) -> float | None:
        with self._cond:
            return self._heap[0][0] if self._heap else None

    def shut_down(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._waiting.clear()
            self._heap.clear()
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def waiting_len(self) -> int:
        return len(self._waiting)

    def processing_len(self) -> int:
        return len(self._processing)

    def __len__(self) -> int:
        return len(self._queue)


class NativeRateLimitingQueue:
    """The Rust queue (kubelet_native.RateLimitingQueueCore) behind the same interface."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        base: float = 0.005,
        cap: float = 1000.0,
    ) -> None:
        import kubelet_native

        self.clock = clock
        self._q = kubelet_native.RateLimitingQueueCore(base, cap)

    def add(self, key: str) -> None:
        self._q.add(key)

    def add_after(self, key: str, delay: float) -> None:
        self._q.add_after(key, delay, self.clock())

    def when(self, key: str) -> float:
        return self._q.when(key)

    def add_rate_limited(self, key: str) -> None:
        self._q.add_rate_limited(key, self.clock())

    def forget(self, key: str) -> None:
        self._q.forget(key)

    def num_requeues(self, key: str) -> int:
        return self._q.num_requeues(key)

    def get_nowait(self) -> str | None:
        return self._q.get_nowait(self.clock())

    def get(self, timeout: float | None = None) -> str | None:
        return self._q.get(self.clock(), timeout)

    def done(self, key: str) -> None:
        self._q.done(key)

    def next_ready(self) -> float | None:
        return self._q.next_ready()

    def shut_down(self) -> None:
        self._q.shut_down()

    @property
    def shutting_down(self) -> bool:
        return self._q.shutting_down

    def waiting_len(self) -> int:
        return self._q.waiting_len()

    def processing_len(self) -> int:
        return self._q.processing_len()

    def __len__(self) -> int:
        return len(self._q)


RateLimitingQueue: type[ReferenceRateLimitingQueue] | type[NativeRateLimitingQueue] = (
    NativeRateLimitingQueue if kubelet.__impl__ == "native" else ReferenceRateLimitingQueue
)
