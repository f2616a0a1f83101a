"""Container change -> pod status in the API, at density.

After the steady state, K running containers are stopped through the runtime's
own CRI socket (StopContainer, timeout 0: as a crash or an OOM kill would end
them), a few per second; the run's watch notes when the API first shows each
change (the container terminated, waiting to restart, or restarted). The time
from the stop to that watch event is what a user waits to see a container's
change: the kubelet's relist (or event), its sync and its status write.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from benches.procmetrics import pct
from kubelet.cri.errors import CRIError
from kubelet.cri.remote import RemoteRuntimeService


def _first_container(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def _changed(cs: dict[str, Any], restarts: int) -> bool:
    state = cs.get("state") or {}
    return (
        int(cs.get("restartCount") or 0) > restarts
        or "terminated" in state
        or "waiting" in state
        or "terminated" in (cs.get("lastState") or {})
    )


class ChangeProbe:
    def __init__(self) -> None:
        self.latest: dict[str, dict[str, Any]] = {}  # pod name -> its first container status
        self.pending: dict[str, tuple[float, int]] = {}  # pod name -> (stopped at, restarts)
        self.seen: dict[str, float] = {}  # pod name -> seconds from the stop to the watch
        self.failed = 0

    def observe(self, pod: dict[str, Any], now: float) -> None:
        """Every pod the run's watch delivers."""
        name = (pod.get("metadata") or {}).get("name", "")
        cs = _first_container(pod)
        if cs:
            self.latest[name] = cs
        started = self.pending.get(name)
        if started is not None and cs and _changed(cs, started[1]):
            self.seen[name] = now - started[0]
            del self.pending[name]

    async def trigger(self, endpoint: str, k: int, rate: float) -> None:
        running = [n for n, cs in self.latest.items()
                   if "running" in (cs.get("state") or {}) and cs.get("containerID")]  # fmt: skip
        chosen = random.Random(0).sample(sorted(running), min(k, len(running)))
        rt = RemoteRuntimeService(endpoint, 30)
        try:
            t0 = time.monotonic()
            for i, name in enumerate(chosen):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                cs = self.latest[name]
                cid = str(cs["containerID"]).split("://", 1)[-1]
                self.pending[name] = (time.monotonic(), int(cs.get("restartCount") or 0))
                try:
                    await rt.stop_container(cid, 0)
                except CRIError:
                    self.pending.pop(name, None)
                    self.failed += 1
        finally:
            await rt.close()

    async def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:  # noqa: ASYNC110 (the watch task fills it)
            await asyncio.sleep(0.2)

    def result(self) -> dict[str, Any]:
        lat = list(self.seen.values())
        return {
            "stopped": len(self.seen) + len(self.pending),
            "seen": len(lat),
            "not_seen": len(self.pending),
            "stop_failed": self.failed,
            "p50_s": pct(lat, 0.5),
            "p90_s": pct(lat, 0.9),
            "p99_s": pct(lat, 0.99),
            "max_s": max(lat) if lat else None,
        }
