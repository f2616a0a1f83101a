"""The status manager (pkg/kubelet/status/status_manager.go).

It keeps the latest status the kubelet computed for each pod; in standalone
mode that is what /pods serves. With an API client it also writes statuses to
the API server through the pods/status subresource (NodeRestriction allows a
node nothing else on pods):

- each change queues the pod's UID in a rate-limited queue (a key is queued
  once; failures back off per pod); up to `concurrency` patches run at once,
  so one slow pod never holds back the others;
- the patch carries only what differs from the API's copy, which comes from
  the pod watch (no GET before a patch), plus metadata.uid as a precondition;
- every 10 s a reconcile queues the pods whose API copy differs from ours;
- static pods report through their mirror pod;
- a pod being deleted is deleted for good (grace 0, UID precondition) once
  its containers are stopped and its final status is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubelet import metrics
from kubelet import types as v1
from kubelet.status.conditions import DISRUPTION_TARGET
from kubelet.status.generation import status_observed_generation
from kubelet.types import TERMINAL_PHASES, JSONObject, Pod, is_static, name, namespace, uid
from kubelet.util.workqueue import RateLimitingQueue

if TYPE_CHECKING:
    from kubelet.client.rest import APIClient

log = logging.getLogger(__name__)

RECONCILE_PERIOD = 10.0
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(slots=True)
class Versioned:
    status: v1.PodStatus
    version: int


def _comparable(status: v1.PodStatus) -> dict[str, object]:
    # Transition times alone do not make a new status.
    s: dict[str, object] = dict(status)
    s["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    return s


def _cond_view(c: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in c.items() if k != "lastTransitionTime" and v is not None}


def _with_generation(
    status: v1.PodStatus, pod: Pod | None, old: v1.PodStatus | None, tracking: bool
) -> v1.PodStatus:
    """status with observedGeneration from the pod it was made from, never below
    what the previous status said (a sync of an older copy of the pod must not
    step it back)."""
    before = int((old or {}).get("observedGeneration") or 0)
    gen = status_observed_generation(pod, tracking) if pod is not None else before
    gen = max(gen, before)
    if gen == int(status.get("observedGeneration") or 0):
        return status
    out = status.copy()
    if gen:
        out["observedGeneration"] = gen
    else:
        out.pop("observedGeneration", None)
    return out


# Top-level status fields only the kubelet writes: when it stops setting one,
# the patch clears it (strategic merge patch: null deletes).
_KUBELET_OWNED = ("reason", "message", "podIP", "podIPs", "initContainerStatuses")
_DROPPED_WHEN_OVER = ("PodResizePending", "PodResizeInProgress")
# PodStatus lists whose patch strategy is merge with "ip" as the key.
_MERGE_BY_IP = ("podIPs", "hostIPs")


def hold_terminal(api: Mapping[str, Any], ours: v1.PodStatus, could_run: bool) -> Mapping[str, Any]:
    """mergePodStatus's guard: a pod that may still have running containers is
    never reported Succeeded or Failed. Until its containers have stopped, the
    API keeps its phase, reason and message, and the DisruptionTarget
    condition waits with them. The final phase then comes from how the
    containers ended (a victim whose containers exit 0 on SIGTERM ends
    Succeeded), not from the kill's Failed."""
    if (
        not could_run
        or ours.get("phase") not in TERMINAL_PHASES
        or api.get("phase") in TERMINAL_PHASES
    ):
        return ours
    out: dict[str, Any] = dict(ours)
    for key in ("phase", "reason", "message"):
        if key in api:
            out[key] = api[key]
        else:
            out.pop(key, None)
    out["conditions"] = [
        c for c in ours.get("conditions") or [] if c.get("type") != DISRUPTION_TARGET
    ]
    return out


def status_patch(api: Mapping[str, Any], ours: Mapping[str, Any]) -> JSONObject:
    """A strategic merge patch that turns `api` into `ours`, with only what differs.

    Conditions merge by type (their patch strategy), so only changed ones are
    sent, with null for the keys the API copy has and ours dropped (a merge
    would otherwise keep, say, a stale "message"). podIPs and hostIPs merge by
    ip: dropped IPs are deleted by name. Other lists are atomic and sent whole. Fields the kubelet does not own are left to whoever set them.
    """
    patch: JSONObject = {}
    for key, value in ours.items():
        if key == "conditions":
            have = {c.get("type"): c for c in api.get("conditions") or []}
            changed = []
            for c in value:
                old = have.get(c["type"], {})
                if _cond_view(old) != _cond_view(c):
                    out = dict(c)
                    for k in old:
                        if k not in c:
                            out[k] = None
                    changed.append(out)
            ours_types = {c["type"] for c in value}
            # Conditions the kubelet sets only while they hold (a resize's):
            # gone from ours, deleted by type, or the merge would keep them.
            changed += [
                {"$patch": "delete", "type": t}
                for t in have
                if t in _DROPPED_WHEN_OVER and t not in ours_types
            ]
            if changed:
                patch["conditions"] = changed
        elif key in _MERGE_BY_IP and isinstance(value, list):
            before = api.get(key) or []
            if before != value:
                # Lists merged by "ip": an item the new list drops must be deleted
                # by name, and the order set, or the merge keeps the old IP beside
                # the new one (a pod recreated in a new sandbox with a new IP).
                ips = {i.get("ip") for i in value}
                patch[key] = list(value) + [
                    {"$patch": "delete", "ip": i.get("ip")}
                    for i in before
                    if i.get("ip") not in ips
                ]
                patch[f"$setElementOrder/{key}"] = [{"ip": i.get("ip")} for i in value]
        elif api.get(key) != value:
            patch[key] = value
    for key in _KUBELET_OWNED:
        if key not in ours and api.get(key) is not None:
            patch[key] = None
    return patch


class StatusManager:
    def __init__(
        self,
        client: APIClient | None = None,
        api_pod: Callable[[str], Pod | None] | None = None,
        desired_pod: Callable[[str], Pod | None] | None = None,
        mirror_of: Callable[[Pod], Pod | None] | None = None,
        can_delete: Callable[[str], bool] | None = None,
        could_run: Callable[[str], bool] | None = None,
        concurrency: int = 16,
        tracking: bool = True,
        on_status_set: Callable[[str, v1.PodStatus], None] | None = None,
    ) -> None:
        self._statuses: dict[str, Versioned] = {}
        # Told of every new status (the pod startup SLI marks "running" there).
        self.on_status_set = on_status_set
        # uid -> when its status first changed since the API last took one
        # (kubelet_pod_status_sync_duration_seconds).
        self._changed_at: dict[str, float] = {}
        self.updates = 0
        self.client = client
        # The API's copy of a pod by UID (from the watch), the pod the kubelet
        # runs by UID, the mirror pod of a static pod, and whether a pod's
        # containers are all stopped.
        self.api_pod = api_pod or (lambda _u: None)
        self.desired_pod = desired_pod or (lambda _u: None)
        self.mirror_of = mirror_of or (lambda _p: None)
        self.can_delete = can_delete or (lambda _u: True)
        # Whether a pod's worker may still have containers running (podWorkers'
        # CouldHaveRunningContainers): its terminal phase waits until it has not.
        self.could_run = could_run or (lambda _u: False)
        self.concurrency = concurrency
        # PodObservedGenerationTracking: statuses carry the generation they answer.
        self.tracking = tracking
        self.queue = RateLimitingQueue(base=0.5, cap=30.0)
        self._kick = asyncio.Event()
        # uid -> (our status version, the API copy's resourceVersion) last seen to
        # agree: the reconcile skips those, so its cost is a lookup per pod, not a diff.
        self._in_sync: dict[str, tuple[int, str]] = {}
        self.patches = 0
        self.deletes = 0

    # ----------------------------------------------------------- local state
    def get(self, uid: str) -> v1.PodStatus | None:
        v = self._statuses.get(uid)
        return v.status if v else None

    def version(self, uid: str) -> int:
        v = self._statuses.get(uid)
        return v.version if v else 0

    def set_pod_status(self, uid: str, status: v1.PodStatus, pod: Pod | None = None) -> bool:
        """Store a new status computed from `pod` (SetPodStatus); False when nothing
        but timestamps changed. Without the pod, the generation stays the one
        the previous status answered."""
        cur = self._statuses.get(uid)
        status = _with_generation(status, pod, cur.status if cur else None, self.tracking)
        if cur is not None and _comparable(cur.status) == _comparable(status):
            return False
        self._statuses[uid] = Versioned(status, (cur.version if cur else 0) + 1)
        self.updates += 1
        if self.client is not None:
            self._changed_at.setdefault(uid, time.monotonic())
        if self.on_status_set is not None:
            self.on_status_set(uid, status)
        self.enqueue(uid)
        return True

    def remove(self, uid: str) -> None:
        self._statuses.pop(uid, None)
        self._in_sync.pop(uid, None)
        self._changed_at.pop(uid, None)

    # ------------------------------------------------------------ API writes
    def enqueue(self, uid: str) -> None:
        if self.client is not None:
            self.queue.add(uid)
            self._kick.set()

    async def run(self, stop: asyncio.Event) -> None:
        if self.client is None:
            return
        sem = asyncio.Semaphore(self.concurrency)
        inflight: set[asyncio.Task[None]] = set()
        next_reconcile = time.monotonic() + RECONCILE_PERIOD
        try:
            while not stop.is_set():
                while True:
                    key = self.queue.get_nowait()
                    if key is None:
                        break
                    await sem.acquire()
                    t = asyncio.create_task(self._sync_key(key, sem))
                    inflight.add(t)
                    t.add_done_callback(inflight.discard)
                now = time.monotonic()
                if now >= next_reconcile:
                    next_reconcile = now + RECONCILE_PERIOD
                    self.reconcile()
                    continue
                wait = next_reconcile - now
                ready = self.queue.next_ready()
                if ready is not None:
                    wait = min(wait, max(0.0, ready - now))
                self._kick.clear()
                kick = asyncio.ensure_future(self._kick.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({kick, stopper}, timeout=wait, return_when="FIRST_COMPLETED")
                kick.cancel()
                stopper.cancel()
        finally:
            self.queue.shut_down()
            for t in list(inflight):
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)

    def reconcile(self) -> None:
        """Queue every pod whose API copy no longer matches what the kubelet computed."""
        for u, ours in list(self._statuses.items()):
            target = self._target(u)
            if target is None:
                continue
            md = target["metadata"]
            if md.get("deletionTimestamp"):
                if self.can_delete(u):
                    self.queue.add(u)
                continue
            key = (ours.version, str(md.get("resourceVersion", "")))
            if self._in_sync.get(u) == key:
                continue
            if status_patch(target.get("status") or {}, ours.status):
                self.queue.add(u)
            else:
                self._in_sync[u] = key
        self._kick.set()

    def _target(self, u: str) -> Pod | None:
        """The API object that carries pod `u`'s status: itself, or a static pod's mirror."""
        pod = self.desired_pod(u)
        if pod is not None and is_static(pod):
            return self.mirror_of(pod)
        return self.api_pod(u)

    async def _sync_key(self, u: str, sem: asyncio.Semaphore) -> None:
        try:
            await self._sync_pod(u)
            self.queue.forget(u)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # one pod's failure must not stop the others: retried
            log.warning("Failed to update status for pod %s, will retry: %s", u, err)
            self.queue.add_rate_limited(u)
            self._kick.set()
        finally:
            self.queue.done(u)
            sem.release()

    async def _sync_pod(self, u: str) -> None:
        from kubelet.client.reflector import compact
        from kubelet.client.rest import APIError

        assert self.client is not None  # run() syncs only with an API client
        target = self._target(u)
        if target is None:
            return  # not in the API (yet), or a static pod without a mirror pod
        tu = uid(target)
        path = f"/api/v1/namespaces/{namespace(target)}/pods/{name(target)}"
        ours = self._statuses.get(u)
        if ours is not None:
            api = target.get("status") or {}
            sent = hold_terminal(api, ours.status, self.could_run(u))
            patch = status_patch(api, sent)
            if patch:
                body = {"metadata": {"uid": tu}, "status": patch}
                try:
                    updated = await self.client.patch(
                        path + "/status", body, content_type=STRATEGIC_MERGE_PATCH
                    )
                except APIError as err:
                    if err.not_found or err.conflict:
                        log.info("Pod %s is gone or replaced; not updating its status", u)
                        return
                    raise
                self.patches += 1
                # Later diffs start from what the server now holds, even before
                # the watch delivers it.
                compact(updated)  # its status is kept: held once per pod
                target["status"] = updated.get("status", target.get("status"))
                rv = str(updated.get("metadata", {}).get("resourceVersion", ""))
                target["metadata"]["resourceVersion"] = rv
                if sent is ours.status:
                    # A held terminal phase is not in sync: the reconcile sends
                    # it once nothing could run (after a restart, say, when
                    # DRA claims are unprepared by their reconcile loop).
                    self._in_sync[u] = (ours.version, rv)
                log.debug("Patched status of pod %s: %s", u, patch)
            self._synced(u, ours.version)  # patched, or the API had it already
        if target["metadata"].get("deletionTimestamp") and not is_static(target):
            if self.can_delete(u):
                await self._delete(u, path, tu)

    def _synced(self, u: str, version: int) -> None:
        """The API holds status `version` of pod u: unless a newer one waits, the
        time since the first change it answers is the status sync duration."""
        cur = self._statuses.get(u)
        if cur is not None and cur.version == version and u in self._changed_at:
            metrics.POD_STATUS_SYNC_DURATION.observe(time.monotonic() - self._changed_at.pop(u))

    async def _delete(self, u: str, path: str, target_uid: str) -> None:
        from kubelet.client.rest import APIError

        assert self.client is not None  # run() syncs only with an API client
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": target_uid},
        }
        try:
            await self.client.delete(path, options)
            self.deletes += 1
            log.info("Pod %s deleted from the API server after termination", u)
        except APIError as err:
            if not (err.not_found or err.conflict):
                raise
