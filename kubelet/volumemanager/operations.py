"""One operation per volume at a time, with exponential back-off per failing
volume (nestedpendingoperations + exponentialbackoff upstream: 500 ms doubling
up to 2 min 2 s)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from kubelet import metrics
from kubelet.util.clock import Clock

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 122.0

OpKey = tuple[str, str, str]  # (pod uid, plugin name, volume name)
MOUNT, UNMOUNT = "mount", "unmount"


@dataclass
class Backoff:
    until: float
    duration: float
    last_error: str


class PendingOperations:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._running: dict[OpKey, asyncio.Task[None]] = {}
        self._per_pod: dict[str, int] = {}
        # Back-off is kept per kind: a volume failing to mount must not delay
        # its tear-down once the pod is gone.
        self._backoff: dict[tuple[OpKey, str], Backoff] = {}
        self._started: dict[OpKey, float] = {}

    def busy(self, key: OpKey) -> bool:
        return key in self._running

    def pod_busy(self, uid: str) -> bool:
        return self._per_pod.get(uid, 0) > 0

    def retry_at(self, key: OpKey, kind: str) -> float:
        b = self._backoff.get((key, kind))
        return b.until if b is not None else 0.0

    def start(self, key: OpKey, coro: Coroutine[Any, Any, None]) -> None:
        assert key not in self._running
        self._per_pod[key[0]] = self._per_pod.get(key[0], 0) + 1
        self._started[key] = self.clock.monotonic()
        self._running[key] = asyncio.ensure_future(coro)

    def finish(self, key: OpKey) -> float:
        """Called by the operation itself as its last step; returns its seconds."""
        started = self._started.pop(key, None)
        elapsed = 0.0 if started is None else self.clock.monotonic() - started
        if self._running.pop(key, None) is not None:
            n = self._per_pod[key[0]] - 1
            if n:
                self._per_pod[key[0]] = n
            else:
                del self._per_pod[key[0]]
        return elapsed

    def failed(
        self,
        key: OpKey,
        kind: str,
        error: str,
        initial: float = INITIAL_BACKOFF,
        cap: float = MAX_BACKOFF,
    ) -> Backoff:
        now = self.clock.monotonic()
        prev = self._backoff.get((key, kind))
        duration = initial if prev is None else min(prev.duration * 2, cap)
        b = Backoff(until=now + duration, duration=duration, last_error=error)
        self._backoff[(key, kind)] = b
        return b

    @staticmethod
    def observe(key: OpKey, kind: str, error: str, seconds: float) -> None:
        """storage_operation_duration_seconds, labelled as upstream's kubelet does."""
        op = "volume_mount" if kind == MOUNT else "volume_unmount"
        status = "fail-unknown" if error else "success"
        metrics.STORAGE_OPERATION_DURATION.labels(key[1], op, status, "false").observe(seconds)

    def succeeded(self, key: OpKey, kind: str) -> None:
        self._backoff.pop((key, kind), None)

    def forget(self, key: OpKey) -> None:
        """The volume is gone from both worlds: drop its back-off records."""
        self._backoff.pop((key, MOUNT), None)
        self._backoff.pop((key, UNMOUNT), None)

    async def cancel_all(self) -> None:
        tasks = list(self._running.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
