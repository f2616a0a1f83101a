"""The pod work queue (pkg/kubelet/util/queue): keys that become due at a time.

enqueue(key, delay) sets (overwrites) when a key is due; get_work(now) takes
every due key in time order, ties in enqueue order. A binary heap with lazy deletion keeps both
O(log n), where the Go kubelet scans its whole map every second.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

import kubelet


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
