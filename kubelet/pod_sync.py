"""The pod lifecycle behind the pod workers (Kubelet.SyncPod, SyncTerminatingPod
and SyncTerminatedPod in kubelet.go): everything done to one pod, in one place.

A sync makes the pod's directories and cgroup, keeps its mirror pod, asks the
runtime manager to bring the containers to the spec, and turns what the
runtime reports into the pod's API status. Terminating stops the containers
within the grace period and reports their final state; terminated releases
what the pod held (runtime objects, cgroup, directories, admission).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Callable

from kubelet import metrics
from kubelet import types as v1
from kubelet.allocation.allocation_manager import TRIGGER_POD_RESIZED, AllocationManager
from kubelet.client.rest import API_ERRORS
from kubelet.cm.cgroup_manager import CgroupError, PodContainerManager
from kubelet.cm.dra.manager import DRAManager
from kubelet.container.cache import PodCache
from kubelet.container.runtime import RUNNING, PodStatus
from kubelet.events import Recorder
from kubelet.kubelet_pods import make_pod_data_dirs, pod_dir
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.lifecycle.predicate import Admitter
from kubelet.mirror_client import MirrorClient, NodeNotRegistered, mirror_matches
from kubelet.pod_workers import PodSyncResult, UpdateType
from kubelet.podmanager import PodManager
from kubelet.prober.prober_manager import ProbeManager
from kubelet.status import disruption, generate, resize_status, terminal
from kubelet.status.disruption import KubeletTermination
from kubelet.status.generate import asks_recursive_read_only
from kubelet.status.generation import generation
from kubelet.status.resize_conditions import ERROR
from kubelet.status.status_manager import StatusManager
from kubelet.types import (
    TERMINAL_PHASES,
    Pod,
    full_name,
    host_network,
    is_static,
    name,
    namespace,
    object_ref,
    uid,
)
from kubelet.unsupported import unsupported_fields
from kubelet.userns.userns_manager import UsernsManager
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.mountutil import remove_all_one_filesystem
from kubelet.util.workqueue import PodWorkQueue
from kubelet.volumemanager import VolumeManager

log = logging.getLogger(__name__)

# What creating a mirror pod can fail with, none of it fatal to the static pod.
_MIRROR_ERRORS: tuple[type[Exception], ...] = (*API_ERRORS, NodeNotRegistered)

DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
UNMOUNT_WAIT = 30.0


_TOLD_NOTHING: frozenset[str] = frozenset()


class KubeletPodSyncer:
    """Implements pod_workers.PodSyncer for the Kubelet. Per-pod state lives in
    dicts keyed by UID and is touched only by that pod's worker (or by the
    syncLoop, which never awaits between reading and writing it)."""

    def __init__(
        self,
        root_dir: str,
        node_ips: list[str],
        runtime_manager: RuntimeManager,
        status_manager: StatusManager,
        probes: ProbeManager,
        pod_manager: PodManager,
        cache: PodCache,
        work_queue: PodWorkQueue,
        admitter: Admitter,
        volumes: VolumeManager,
        pod_cgroups: PodContainerManager | None = None,
        mirror_client: MirrorClient | None = None,
        recorder: Recorder | None = None,
        clock: Clock = REAL_CLOCK,
        allocation: AllocationManager | None = None,
        userns: UsernsManager | None = None,
        dra: DRAManager | None = None,
        resource_health: generate.ResourceHealth | None = None,
        ready_to_start: bool = True,
        rro_supported: Callable[[Pod], bool] = lambda pod: False,
    ) -> None:
        self.root_dir = root_dir
        self.ready_to_start = ready_to_start  # PodReadyToStartContainersCondition
        # The pod's runtime handler makes recursive read-only mounts (its status).
        self.rro_supported = rro_supported
        # Claims are unprepared once the pod's containers stopped; None: DRA off.
        self.dra = dra
        # Pods' user namespace ranges: freed when the pod has terminated.
        self.userns = userns
        self.node_ips = node_ips
        self.runtime_manager = runtime_manager
        self.status_manager = status_manager
        self.probes = probes
        self.pod_manager = pod_manager
        self.cache = cache
        self.work_queue = work_queue
        self.admitter = admitter
        self.volumes = volumes
        self.pod_cgroups = pod_cgroups
        self.mirror_client = mirror_client
        self.recorder = recorder
        self.clock = clock
        self.allocation = allocation
        self.resource_health = resource_health  # ResourceHealthStatus on
        self._pod_dirs: set[str] = set()
        self._cgroups_made: set[str] = set()
        # pod UID -> (its ephemeral containers when last checked, the fields it
        # was told are not implemented): ephemeral containers are the one part
        # of a spec that can grow new fields after the pod started.
        self._warned: dict[str, tuple[int, frozenset[str]]] = {}
        self._evicted: dict[str, KubeletTermination] = {}
        self._first_seen: dict[str, float] = {}
        self._started_running: set[str] = set()
        # activeDeadlineSeconds: one timer per pod that has one, which queues the
        # pod for a sync when its deadline comes (no sweep over all pods).
        self._deadline_timers: dict[str, asyncio.TimerHandle] = {}
        self._deadline_told: set[str] = set()

    # ------------------------------------------------------- from the loop
    def pod_seen(self, pod_uid: str) -> None:
        """The pod was first seen by a source: start of its startup latency."""
        self._first_seen.setdefault(pod_uid, self.clock.monotonic())

    def mark_evicted(self, pod_uid: str, reason: str, message: str) -> None:
        """The pod is being evicted: its final status says so."""
        self._evicted[pod_uid] = KubeletTermination(reason, message)

    def mark_terminated_by_kubelet(self, pod_uid: str, why: KubeletTermination) -> None:
        """The kubelet stops the pod on its own (node shutdown): its status says
        so from the start of the kill (SyncTerminatingPod's PodStatusFunc)."""
        self._evicted[pod_uid] = why

    def is_evicted(self, pod_uid: str) -> bool:
        return pod_uid in self._evicted

    def pod_dir(self, pod_uid: str) -> str:
        return pod_dir(self.root_dir, pod_uid)

    def _previous_status(self, pod: Pod) -> v1.PodStatus | None:
        """The basis of the next status: the status manager's, or before this
        process has set one (a restarted kubelet) the API's copy, as upstream's
        generateAPIPodStatus does; startTime, conditions' transition times and
        restart counts then carry over a restart."""
        old = self.status_manager.get(uid(pod))
        if old is None:
            api = pod.get("status")
            if isinstance(api, dict) and api.get("phase"):
                return api
        return old

    # ---------------------------------------------------------------- sync
    def _first_sync(self, pod: Pod) -> None:
        """Once per pod: its data dirs (a couple of mkdirs, not worth a thread
        hop), the worker start metrics and the warnings of what is unsupported
        (again for fields an ephemeral container added later brings)."""
        u = uid(pod)
        if u not in self._pod_dirs:
            make_pod_data_dirs(self.root_dir, u)
            self._pod_dirs.add(u)
            seen = self._first_seen.get(u)
            if seen is not None:  # the first sync: the worker has started
                metrics.POD_WORKER_START_DURATION.observe(self.clock.monotonic() - seen)
            metrics.CONTAINERS_PER_POD.observe(len(pod["spec"].get("containers") or []))
        n_ephemeral = len(pod["spec"].get("ephemeralContainers") or [])
        told = self._warned.get(u)
        if told is None or told[0] != n_ephemeral:
            before = _TOLD_NOTHING if told is None else told[1]
            self._warned[u] = (n_ephemeral, self._warn_unsupported(pod, before))

    async def _ensure_pod_cgroup(self, pod: Pod) -> PodSyncResult | None:
        """The pod's cgroup, made before the sandbox (the runtime puts the pod
        under it); the failed sync's result if it cannot be made."""
        u = uid(pod)
        if self.pod_cgroups is None or u in self._cgroups_made:
            return None
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.pod_cgroups.ensure, pod)
        except (OSError, CgroupError) as err:
            if self.recorder is not None:
                msg = f"unable to ensure pod container exists: {err}"
                self.recorder.event(object_ref(pod), "Warning", "FailedCreatePodContainer", msg)
            return PodSyncResult(
                error=f"failed to ensure that the pod: {u} cgroups exist and are correctly "
                f"applied: {err}"
            )
        self._cgroups_made.add(u)
        return None

    def _fail_for_deadline(self, pod: Pod, status: PodStatus, old: v1.PodStatus) -> PodSyncResult:
        """Failed before anything more is started; the worker then kills it."""
        u = uid(pod)
        api = self._api_status(pod, status, self.runtime_manager.waiting.get(u, {}), old)
        self._fail_past_deadline(pod, api)
        self.status_manager.set_pod_status(u, api, pod)
        self.admitter.release(u)
        return PodSyncResult(terminal=True)

    def _observe_running(self, u: str, api: v1.PodStatus) -> None:
        """kubelet_pod_start_duration_seconds, once, when the pod first runs."""
        if api["phase"] == "Running" and u not in self._started_running:
            self._started_running.add(u)
            seen = self._first_seen.get(u)
            if seen is not None:
                metrics.POD_START_DURATION.observe(self.clock.monotonic() - seen)

    async def sync_pod(self, update: UpdateType, pod: Pod, status: PodStatus) -> PodSyncResult:
        u = uid(pod)
        pod = self._allocated(pod, status)
        self._first_sync(pod)
        old = self._previous_status(pod)
        if old is not None and old.get("phase") in TERMINAL_PHASES:
            return PodSyncResult(terminal=True)
        if old is not None and self._past_deadline(pod, old):
            return self._fail_for_deadline(pod, status, old)
        failed = await self._ensure_pod_cgroup(pod)
        if failed is not None:
            return failed
        if self.mirror_client is not None and is_static(pod):
            await self._ensure_mirror(pod)
        self.probes.add_pod(pod)
        # Volumes first: no sandbox or container before every volume is set up
        # (WaitForAttachAndMount). The check never blocks: the volume manager
        # calls back to sync the pod again once its volumes are ready.
        self.volumes.add_pod(pod)
        unmounted = self.volumes.unmounted_volumes(pod)
        if unmounted:
            waiting = self.runtime_manager.waiting.get(u, {})
            api = self._generate(pod, status, waiting)
            self.status_manager.set_pod_status(u, api, pod)
            return PodSyncResult(
                error=f"unmounted volumes=[{' '.join(sorted(unmounted))}]: not set up yet "
                "(synced again as soon as they are)"
            )
        if host_network(pod) and not status.ips:
            # The runtime reports no IPs for a host-network pod; its containers
            # (status.podIP in their env, the hosts file) get the node's, as its
            # API status does.
            status = dataclasses.replace(status, ips=list(self.node_ips))
        result = await self.runtime_manager.sync_pod(pod, status)
        if result.resized:
            status = await self._after_resize(pod, result.resize_error)
        waiting = self.runtime_manager.waiting.get(u, {})
        api = self._generate(pod, status, waiting)
        self.status_manager.set_pod_status(u, api, pod)
        self._arm_deadline(pod, api)
        self._observe_running(u, api)
        if api["phase"] in TERMINAL_PHASES:
            self.admitter.release(u)
            return PodSyncResult(terminal=True)
        if not result.ok:
            return PodSyncResult(error="; ".join(result.errors), retry_after=result.retry_after)
        return PodSyncResult()

    def _generate(
        self, pod: Pod, status: PodStatus, waiting: dict[str, tuple[str, str]]
    ) -> v1.PodStatus:
        """The pod's status from the runtime's, on the previous status read now,
        not at the start of the sync: an eviction may have made the pod Failed
        while the runtime was busy, and that must not be written over."""
        api = self._api_status(pod, status, waiting, self._previous_status(pod), self.probes)
        if self.allocation is not None and self.allocation.enabled:
            u = uid(pod)
            alloc = self.allocation.allocated.get_pod(u)
            resize_status.apply(
                api, alloc, status, self.allocation.conditions.of(u),
                self.allocation.actuated.get_pod(u),
            )  # fmt: skip
        return api

    def _api_status(
        self,
        pod: Pod,
        status: PodStatus,
        waiting: dict[str, tuple[str, str]],
        old: v1.PodStatus | None,
        probes: ProbeManager | None = None,
        terminal: bool = False,
    ) -> v1.PodStatus:
        return generate.generate(
            pod, status, waiting, self.node_ips, old, probes,
            tracking=self.status_manager.tracking, resource_health=self.resource_health,
            terminal=terminal, ready_to_start=self.ready_to_start,
            rro_supported=asks_recursive_read_only(pod) and self.rro_supported(pod),
        )  # fmt: skip

    def _allocated(self, pod: Pod, status: PodStatus) -> Pod:
        """The pod runs with what was allocated; a resize not accepted yet is
        only a wish in its spec."""
        if self.allocation is None:
            return pod
        pod = self.allocation.allocated_pod(pod)
        self._check_resize(pod, status)
        return pod

    async def _after_resize(self, pod: Pod, error: str) -> PodStatus:
        """The runtime is asked again right away (no PLEG event tells of a
        resize; upstream's pod watch condition): the status shows the new sizes
        and the in-progress condition ends in this sync when all went well."""
        assert self.allocation is not None
        u = uid(pod)
        if error:
            self.allocation.conditions.set_in_progress(u, ERROR, error, generation(pod))
        fresh = await self.runtime_manager.get_pod_status(u, name(pod), namespace(pod))
        self.cache.set(u, fresh, None, fresh.timestamp)
        self._check_resize(pod, fresh)
        return fresh

    def _check_resize(self, pod: Pod, status: PodStatus) -> None:
        """PodResizeInProgress follows what the running containers were last
        set to; its end is told by a ResizeCompleted event."""
        assert self.allocation is not None
        running = {c.name for c in status.containers if c.state == RUNNING}
        done = self.allocation.check_in_progress(pod, running)
        if done is None:
            return
        if self.recorder is not None:
            self.recorder.event(object_ref(pod), "Normal", "ResizeCompleted", done)
        # What a shrink freed counts from now on: deferred resizes may fit.
        if self.allocation.settle(pod):
            for u in self.allocation.retry_pending(self.pod_manager.get, TRIGGER_POD_RESIZED):
                self.work_queue.enqueue(u, 0.0)

    def _warn_unsupported(self, pod: Pod, told: frozenset[str]) -> frozenset[str]:
        """Nothing silently ignored: name every field this kubelet does not
        implement yet and the pod was not told of, as a Warning event and a log
        line; the fields it has now been told of."""
        fields = unsupported_fields(pod, dra=self.dra is not None)
        new = [f for f in fields if f not in told]
        if new:
            msg = "Fields not implemented by this kubelet, ignored: " + ", ".join(new)
            log.warning("Pod %s: %s", full_name(pod), msg)
            if self.recorder is not None:
                self.recorder.event(object_ref(pod), "Warning", "UnsupportedPodFields", msg)
        return told.union(fields) if fields else told  # most pods: the shared empty set

    async def _ensure_mirror(self, pod: Pod) -> None:
        """Create the static pod's mirror pod, replacing one that is out of date."""
        assert self.mirror_client is not None
        mirror = self.pod_manager.get_mirror(pod)
        if mirror is not None and mirror_matches(pod, mirror):
            return
        try:
            # Outdated, or being deleted by a user (which would wait for a kubelet
            # that never runs it): delete it now, with grace 0, and make a new one.
            if mirror is not None:
                await self.mirror_client.delete(mirror)
            await self.mirror_client.create(pod)
        except _MIRROR_ERRORS as err:
            # The static pod runs all the same (an API server away at start
            # included); the next sync retries.
            log.warning("Failed creating a mirror pod for %s: %s", full_name(pod), err)

    async def delete_orphaned_mirror(self, mirror: Pod) -> None:
        """A mirror pod whose static pod is gone."""
        if self.mirror_client is None:
            return
        try:
            await self.mirror_client.delete(mirror)
        except API_ERRORS as err:  # housekeeping finds it again and retries
            log.warning("Failed deleting mirror pod %s: %s", full_name(mirror), err)

    # ---------------------------------------------------------- terminating
    async def sync_terminating_pod(self, pod: Pod, grace: int | None) -> None:
        u = uid(pod)
        self.probes.remove_pod(u)
        rm = self.runtime_manager
        status = await rm.get_pod_status(u, name(pod), namespace(pod))
        evicted = self._evicted.get(u)
        # DisruptionTarget and the terminal phase are told together once
        # nothing runs, as upstream's status manager holds the condition back
        # until then (and never Failed while Ready: upstream issue 108594).
        await rm.kill_pod(pod, status, grace, remove=False)
        if self.dra is not None:
            # After the containers stopped, before the status says so (the
            # claim's deallocation waits on it); a failure retries the kill.
            await self.dra.unprepare_resources(pod)
        # Report the final state of every container.
        final = await rm.get_pod_status(u, name(pod), namespace(pod))
        old = self._previous_status(pod)
        api = self._api_status(pod, final, {}, old, terminal=True)
        # Its containers are stopped: its volumes may go now (upstream unmounts
        # a terminated pod's volumes before its object is deleted).
        self.volumes.remove_pod(u)
        if evicted is not None:
            disruption.apply(evicted, api)
        elif old is not None and old.get("phase") in TERMINAL_PHASES and old.get("reason"):
            # A terminal status the kubelet gave a reason (DeadlineExceeded) stands whole.
            api["phase"], api["reason"] = old["phase"], old["reason"]
            api["message"] = old.get("message", "")
        elif self._past_deadline(pod, old or api):
            self._fail_past_deadline(pod, api)
        self.status_manager.set_pod_status(u, terminal.terminate_pod(pod, api), pod)

    # ----------------------------------------------------------- terminated
    async def sync_terminated_pod(self, pod: Pod) -> None:
        u = uid(pod)
        rm = self.runtime_manager
        status = await rm.get_pod_status(u, name(pod), namespace(pod))
        await rm.kill_pod(pod, status, 0, remove=True)
        self.status_manager.remove(u)
        self.admitter.release(u)
        self.cache.delete(u)
        self.work_queue.remove(u)
        self.forget(u)
        loop = asyncio.get_running_loop()
        if self.pod_cgroups is not None:
            await loop.run_in_executor(None, self.pod_cgroups.destroy, pod)
        if self.userns is not None:
            self.userns.release(u)
        # The pod's directory goes only once its volumes are torn down (a tmpfs
        # still mounted there must never be deleted through); housekeeping
        # removes it later otherwise.
        self.volumes.remove_pod(u)
        if await self.volumes.wait_for_unmount(u, UNMOUNT_WAIT):
            try:
                # Never through a mount point: one left there may be a hostPath.
                await loop.run_in_executor(None, remove_all_one_filesystem, self.pod_dir(u))
            except OSError as err:
                log.warning("Failed removing the directory of pod %s: %s", u, err)
        else:
            log.warning("Pod %s: volumes not torn down yet; its directory stays for now", u)

    # ------------------------------------------------------ active deadline
    def _past_deadline(self, pod: Pod, api: v1.PodStatus) -> bool:
        """activeDeadlineSeconds counted from the status' startTime (active_deadline.go)."""
        deadline = pod["spec"].get("activeDeadlineSeconds")
        start = _parse_time(api.get("startTime"))
        if deadline is None or start is None:
            return False
        return self.clock.time() - start >= int(deadline)

    def _fail_past_deadline(self, pod: Pod, api: v1.PodStatus) -> None:
        api["phase"] = "Failed"
        api["reason"], api["message"] = DEADLINE_REASON, DEADLINE_MESSAGE
        u = uid(pod)
        if u not in self._deadline_told and self.recorder is not None:
            self._deadline_told.add(u)
            self.recorder.event(object_ref(pod), "Normal", DEADLINE_REASON, DEADLINE_MESSAGE)

    def _arm_deadline(self, pod: Pod, api: v1.PodStatus) -> None:
        u = uid(pod)
        deadline = pod["spec"].get("activeDeadlineSeconds")
        start = _parse_time(api.get("startTime"))
        if deadline is None or start is None or u in self._deadline_timers:
            return
        # startTime has whole seconds: a little slack so the sync lands past it.
        delay = max(0.0, start + int(deadline) - self.clock.time()) + 0.05
        self._deadline_timers[u] = asyncio.get_running_loop().call_later(
            delay, self.work_queue.enqueue, u, 0.0
        )

    def forget(self, pod_uid: str) -> None:
        for s in (
            self._pod_dirs,
            self._cgroups_made,
            self._started_running,
            self._deadline_told,
        ):
            s.discard(pod_uid)
        self._warned.pop(pod_uid, None)
        timer = self._deadline_timers.pop(pod_uid, None)
        if timer is not None:
            timer.cancel()
        self._evicted.pop(pod_uid, None)
        self._first_seen.pop(pod_uid, None)


def _parse_time(text: object) -> float | None:
    if not text:
        return None
    try:
        t = datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return t.replace(tzinfo=datetime.UTC).timestamp()
