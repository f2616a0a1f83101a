"""A token bucket like client-go's flowcontrol.NewTokenBucketRateLimiter(qps, burst)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """Async token bucket: `await acquire()` waits until a token is available.

    qps <= 0 means unlimited, as for the heartbeat client.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] | None = None) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.clock: Callable[[], float] = clock or time.monotonic
        self.last = self.clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now

    def try_acquire(self) -> bool:
        if self.qps <= 0:
            return True
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        # One waiter at a time keeps the order fair (FIFO on the lock).
        async with self._lock:
            while True:
                self._refill()
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.qps)
