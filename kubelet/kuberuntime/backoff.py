"""Per-key exponential backoff (client-go util/flowcontrol.Backoff) as the kubelet uses it
for CrashLoopBackOff and ImagePullBackOff: 10s doubling to 5m, forgotten after
2x the cap without failures."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Entry:
    backoff: float
    last_update: float


class Backoff:
    def __init__(
        self,
        initial: float = 10.0,
        maximum: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    def _expired(self, event_time: float, last_update: float) -> bool:
        return event_time - last_update > 2 * self.maximum

    def next(self, key: str, event_time: float) -> None:
        """Record a failure at event_time: start at `initial` or double, up to `maximum`.
        The entry is stamped with now, not event_time: a crashed container's finish
        time lies a whole back-off in the past when it is restarted, and stamping that
        would let gc() forget a capped back-off (5m) just before the next crash."""
        e = self._entries.get(key)
        now = self.clock()
        if e is None or self._expired(event_time, e.last_update):
            self._entries[key] = _Entry(self.initial, now)
        else:
            e.backoff = min(e.backoff * 2, self.maximum)
            e.last_update = now

    def now(self) -> float:
        return self.clock()

    def in_backoff_since(self, key: str, event_time: float) -> bool:
        """Is less than the back-off gone by since event_time (a container's finish)?"""
        e = self._entries.get(key)
        if e is None or self._expired(event_time, e.last_update):
            return False
        return self.clock() - event_time < e.backoff

    def in_backoff_since_update(self, key: str) -> bool:
        """Is less than the back-off gone by since the last recorded failure?"""
        e = self._entries.get(key)
        if e is None:
            return False
        now = self.clock()
        if self._expired(now, e.last_update):
            return False
        return now - e.last_update < e.backoff

    def remaining(self, key: str) -> float:
        """Seconds until the back-off for key runs out, counted from its last failure."""
        e = self._entries.get(key)
        if e is None:
            return 0.0
        return max(0.05, e.last_update + e.backoff - self.clock())

    def get(self, key: str) -> float:
        e = self._entries.get(key)
        return e.backoff if e else 0.0

    def gc(self) -> None:
        now = self.clock()
        for k in [k for k, e in self._entries.items() if self._expired(now, e.last_update)]:
            del self._entries[k]

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)
