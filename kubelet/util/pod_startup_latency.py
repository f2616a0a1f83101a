"""The pod startup SLI (kubelet_pod_start_sli_duration_seconds): from a pod's
creationTimestamp until the watch shows all its containers started, minus the
time its images took to pull; and the same without the pull time taken out
(kubelet_pod_start_total_duration_seconds). Upstream's tracker
(pod_startup_latency_tracker.go) defines the moments:

- a pod is tracked from the first time the watch shows it without a startTime
  (so pods that had already started when the kubelet came up are left out);
- pulls count from the first pull that began to the last that ended;
- "running" is first seen when the kubelet sets a status in which every
  container is running with a startedAt, and the figure is taken when the
  watch next shows the pod so (that is when a user sees it);
- a pod that ended (Succeeded or Failed) is forgotten, as is a deleted one.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubelet import metrics
from kubelet.types import TERMINAL_PHASES

Status = Mapping[str, Any]


@dataclass
class _State:
    first_pull: float = 0.0
    last_pull: float = 0.0
    running_at: float = 0.0
    recorded: bool = False


def started(status: Status) -> bool:
    """Every container of the status runs with a startedAt (hasPodStartedSLO)."""
    for cs in status.get("containerStatuses") or []:
        running = (cs.get("state") or {}).get("running")
        if not running or not running.get("startedAt"):
            return False
    return True


def _epoch(ts: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


class PodStartupLatencyTracker:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._pods: dict[str, _State] = {}
        self._first_network_pod_seen = False

    def observed_pod_on_watch(self, pod: Mapping[str, Any], when: float) -> None:
        """Every pod the API server watch delivers, with when it arrived (epoch)."""
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        u = meta.get("uid", "")
        if status.get("phase") in TERMINAL_PHASES:
            self._pods.pop(u, None)
            return
        state = self._pods.get(u)
        if state is None:
            if not status.get("startTime"):
                self._pods[u] = _State()
            return
        if not state.running_at or state.recorded or not started(status):
            return
        created = _epoch(str(meta.get("creationTimestamp") or ""))
        if created is None:
            return
        total = when - created
        pulling = max(0.0, state.last_pull - state.first_pull) if state.last_pull else 0.0
        metrics.POD_START_SLI_DURATION.observe(total - pulling)
        metrics.POD_START_TOTAL_DURATION.observe(total)
        state.recorded = True
        if not (pod.get("spec") or {}).get("hostNetwork") and not self._first_network_pod_seen:
            metrics.FIRST_NETWORK_POD_START_SLI.set(total - pulling)
            self._first_network_pod_seen = True

    def record_image_started_pulling(self, uid: str) -> None:
        state = self._pods.get(uid)
        if state is not None and not state.first_pull:
            state.first_pull = self.clock()

    def record_image_finished_pulling(self, uid: str) -> None:
        state = self._pods.get(uid)
        if state is not None:
            state.last_pull = self.clock()

    def record_status_updated(self, uid: str, status: Status) -> None:
        """Every status the kubelet sets for a pod."""
        state = self._pods.get(uid)
        if state is not None and not state.recorded and not state.running_at and started(status):
            state.running_at = self.clock()

    def delete(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def retain(self, uids: set[str]) -> None:
        """After a full list: forget the pods it no longer holds."""
        for u in self._pods.keys() - uids:
            del self._pods[u]
