"""kubelet_pod_start_sli_duration_seconds as upstream's tracker defines it: from
creationTimestamp to the watch showing every container started, minus the pulls;
tracked only for pods first seen without a startTime; once per pod."""

from __future__ import annotations

from typing import Any

from kubelet import metrics
from kubelet.util.pod_startup_latency import PodStartupLatencyTracker

CREATED = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # CREATED as epoch seconds


def _count(h: Any) -> float:
    return next(s.value for s in h.collect()[0].samples if s.name.endswith("_count"))


def _sum(h: Any) -> float:
    return next(s.value for s in h.collect()[0].samples if s.name.endswith("_sum"))


def pod(uid: str, phase: str = "Pending", started: bool = False, start_time: bool = False,
        host_network: bool = False) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {"phase": phase}
    if start_time:
        status["startTime"] = CREATED
    cs = {"name": "c", "state": {"running": {"startedAt": CREATED}} if started else {"waiting": {}}}
    status["containerStatuses"] = [cs]
    return {"metadata": {"uid": uid, "creationTimestamp": CREATED},
            "spec": {"hostNetwork": host_network}, "status": status}  # fmt: skip


def test_sli_excludes_pulls_and_is_taken_when_the_watch_shows_it() -> None:
    now = [T0]
    t = PodStartupLatencyTracker(clock=lambda: now[0])
    sli0, total0 = _sum(metrics.POD_START_SLI_DURATION), _sum(metrics.POD_START_TOTAL_DURATION)
    n0 = _count(metrics.POD_START_SLI_DURATION)
    t.observed_pod_on_watch(pod("a"), T0 + 0.1)  # new, no startTime: tracked
    now[0] = T0 + 1.0
    t.record_image_started_pulling("a")
    now[0] = T0 + 3.0
    t.record_image_finished_pulling("a")
    now[0] = T0 + 3.5
    t.record_status_updated("a", pod("a", "Running", started=True)["status"])
    # The watch still shows the old status: nothing yet.
    t.observed_pod_on_watch(pod("a"), T0 + 3.6)
    assert _count(metrics.POD_START_SLI_DURATION) == n0
    t.observed_pod_on_watch(pod("a", "Running", started=True, start_time=True), T0 + 4.0)
    assert _count(metrics.POD_START_SLI_DURATION) == n0 + 1
    assert abs(_sum(metrics.POD_START_SLI_DURATION) - sli0 - 2.0) < 1e-6  # 4 s minus 2 s pulling
    assert abs(_sum(metrics.POD_START_TOTAL_DURATION) - total0 - 4.0) < 1e-6
    # Once per pod.
    t.observed_pod_on_watch(pod("a", "Running", started=True, start_time=True), T0 + 9.0)
    assert _count(metrics.POD_START_SLI_DURATION) == n0 + 1


def test_pods_already_started_and_finished_ones_are_not_measured() -> None:
    t = PodStartupLatencyTracker(clock=lambda: T0 + 5)
    n0 = _count(metrics.POD_START_SLI_DURATION)
    # Seen first with a startTime (a kubelet restart): never tracked.
    t.observed_pod_on_watch(pod("b", "Running", started=True, start_time=True), T0 + 1)
    t.record_status_updated("b", pod("b", "Running", started=True)["status"])
    t.observed_pod_on_watch(pod("b", "Running", started=True, start_time=True), T0 + 2)
    # Tracked, then finished before it was seen running: forgotten.
    t.observed_pod_on_watch(pod("c"), T0 + 1)
    t.observed_pod_on_watch(pod("c", "Succeeded"), T0 + 2)
    t.record_status_updated("c", pod("c", "Running", started=True)["status"])
    t.observed_pod_on_watch(pod("c", "Running", started=True, start_time=True), T0 + 3)
    # Not every container running: not started.
    t.observed_pod_on_watch(pod("d"), T0 + 1)
    st = pod("d", "Running", started=True)["status"]
    st["containerStatuses"].append({"name": "e", "state": {"waiting": {}}})
    t.record_status_updated("d", st)
    t.observed_pod_on_watch(pod("d", "Running", started=True, start_time=True), T0 + 3)
    assert _count(metrics.POD_START_SLI_DURATION) == n0
    # A list that no longer holds a pod drops it.
    t.retain(set())
    assert t._pods == {}
