"""The pod resize conditions, PodResizePending and PodResizeInProgress (kept by
the status manager upstream, podResizeConditions), per pod.

The kubelet owns both: the status generator drops them from what it carries
over and the syncer adds the ones listed here.
"""

from __future__ import annotations

from collections.abc import Callable

from kubelet import metrics
from kubelet import types as v1

PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
INFEASIBLE = "Infeasible"
DEFERRED = "Deferred"
ERROR = "Error"


def updated_condition(
    ctype: str, old: v1.PodCondition | None, reason: str, message: str, generation: int, now: str
) -> v1.PodCondition:
    """updatedPodResizeCondition: a new reason moves lastTransitionTime."""
    moved = old is None or old.get("reason", "") != reason
    c: v1.PodCondition = {
        "type": ctype,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now if moved or old is None else old.get("lastTransitionTime", now),
    }
    if generation:
        c["observedGeneration"] = generation
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


class ResizeConditions:
    def __init__(self, now: Callable[[], str]) -> None:
        self._now = now
        self._by_pod: dict[str, dict[str, v1.PodCondition]] = {}
        self._in_progress = 0
        self._pending: dict[str, int] = {}  # by lowercase reason

    def of(self, pod_uid: str) -> list[v1.PodCondition]:
        """Pending first, then in progress, as upstream lists them."""
        got = self._by_pod.get(pod_uid, {})
        return [got[t] for t in (PENDING, IN_PROGRESS) if t in got]

    def get(self, pod_uid: str, ctype: str) -> v1.PodCondition | None:
        return self._by_pod.get(pod_uid, {}).get(ctype)

    def set_pending(self, pod_uid: str, reason: str, message: str, generation: int) -> None:
        """The same verdict again changes nothing (a retry of a deferred resize
        must not rewrite the pod's status each time)."""
        conds = self._by_pod.setdefault(pod_uid, {})
        old = conds.get(PENDING)
        if (
            old is not None
            and old.get("reason", "") == reason
            and old.get("message", "") == message
            and int(old.get("observedGeneration") or 0) == generation
        ):
            return
        self._put_pending(
            pod_uid, updated_condition(PENDING, old, reason, message, generation, self._now())
        )

    def set_in_progress(self, pod_uid: str, reason: str, message: str, generation: int) -> None:
        """An existing condition keeps its generation, and its reason and
        message unless new ones are given: clear it first to restart it."""
        conds = self._by_pod.setdefault(pod_uid, {})
        old = conds.get(IN_PROGRESS)
        if old is not None:
            if not reason and not message:
                reason, message = old.get("reason", ""), old.get("message", "")
            generation = int(old.get("observedGeneration") or 0)
        conds[IN_PROGRESS] = updated_condition(
            IN_PROGRESS, old, reason, message, generation, self._now()
        )
        if old is None:
            self._count_in_progress(+1)

    def clear_pending(self, pod_uid: str) -> None:
        old = self._by_pod.get(pod_uid, {}).pop(PENDING, None)
        if old is not None:
            self._count_pending(old.get("reason", ""), -1)

    def _put_pending(self, pod_uid: str, cond: v1.PodCondition) -> None:
        conds = self._by_pod.setdefault(pod_uid, {})
        old = conds.get(PENDING)
        if old is not None:
            self._count_pending(old.get("reason", ""), -1)
        conds[PENDING] = cond
        self._count_pending(cond.get("reason", ""), +1)

    def _count_pending(self, reason: str, delta: int) -> None:
        # kubelet_pod_pending_resizes{reason}: a reason no pod has is not shown
        # (upstream resets the family and sets the non-zero counts).
        key = reason.lower()
        n = self._pending.get(key, 0) + delta
        if n > 0:
            self._pending[key] = n
            metrics.POD_PENDING_RESIZES.labels(key).set(n)
        else:
            self._pending.pop(key, None)
            try:
                metrics.POD_PENDING_RESIZES.remove(key)
            except KeyError:
                pass  # never shown

    def clear_in_progress(self, pod_uid: str) -> bool:
        """Answers whether there was one."""
        gone = self._by_pod.get(pod_uid, {}).pop(IN_PROGRESS, None) is not None
        if gone:
            self._count_in_progress(-1)
        return gone

    def _count_in_progress(self, delta: int) -> None:
        # kubelet_pod_in_progress_resizes, kept as a count: no scan of all pods.
        self._in_progress += delta
        metrics.POD_IN_PROGRESS_RESIZES.set(self._in_progress)

    def is_reason(self, pod_uid: str, reason: str) -> bool:
        c = self.get(pod_uid, PENDING)
        return c is not None and c.get("reason") == reason

    def backfill(self, pod_uid: str, api_conditions: list[v1.PodCondition]) -> None:
        """After a restart: the conditions the API shows are taken up again."""
        for c in api_conditions:
            t = c.get("type")
            if t in (PENDING, IN_PROGRESS):
                cond = updated_condition(
                    t, None, c.get("reason", ""), c.get("message", ""),
                    int(c.get("observedGeneration") or 0), self._now(),
                )  # fmt: skip
                if t == PENDING:
                    self._put_pending(pod_uid, cond)
                    continue
                if self.get(pod_uid, t) is None:
                    self._count_in_progress(+1)
                self._by_pod.setdefault(pod_uid, {})[t] = cond

    def forget(self, pod_uid: str) -> None:
        self.clear_pending(pod_uid)
        self.clear_in_progress(pod_uid)
        self._by_pod.pop(pod_uid, None)
