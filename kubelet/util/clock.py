"""The clock the kubelet's loops read (k8s.io/utils/clock): wall time for
timestamps compared with the runtime's and the cache's, monotonic time for
periods. Injected so tests step time instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class RealClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """Both readings move only when step() is called."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._wall = start
        self._mono = 0.0

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def step(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds


REAL_CLOCK = RealClock()
