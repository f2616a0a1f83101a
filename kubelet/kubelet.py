"""The Kubelet: pod sources, PLEG, pod workers and the syncLoop (pkg/kubelet/kubelet.go).

The syncLoop is one coroutine over config updates, PLEG events, sync requests
(probe results, volumes ready), the 1s sync tick (pods due in the work queue)
and the 2s housekeeping tick. Its handlers only hand work to pod workers;
nothing here costs O(all pods) per second except the PLEG's relist.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

from kubelet import metrics
from kubelet.allocation.allocation_manager import (
    TRIGGER_PERIODIC,
    TRIGGER_POD_UPDATED,
    TRIGGER_PODS_ADDED,
    TRIGGER_PODS_REMOVED,
)
from kubelet.apis.config import KubeletConfiguration
from kubelet.client.rest import APIClient
from kubelet.config.config import Op, PodUpdate
from kubelet.config.file import FileSource
from kubelet.config.http import HTTPSource
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.events import AnnotatedRecorder
from kubelet.features import Feature
from kubelet.kubelet_getters import SyncLoopHeartbeat
from kubelet.kubelet_node_subsystems import (
    GarbageCollectors,
    build_admission,
    build_gc,
    build_host,
    build_node_status,
    build_pod_resources,
)
from kubelet.kubelet_pods import setup_data_dirs
from kubelet.kubelet_runtime_subsystems import RuntimeSetup, build_runtime, build_workers
from kubelet.kubelet_subsystems import (
    Node,
    NodeSetup,
    build_dra_claims,
    build_node,
    build_pods,
    build_probes,
    build_resource_managers,
    build_volumes,
)
from kubelet.kuberuntime import legacy
from kubelet.lifecycle.predicate import Rejection
from kubelet.mirror_client import is_mirror
from kubelet.pleg.pleg import PodLifecycleEvent
from kubelet.pod_workers import PodWork, UpdateType, WorkerSync, working_pod_counts
from kubelet.runtime_orphans import RuntimeOrphans
from kubelet.server.checkpoint import CHECKPOINTS_DIR
from kubelet.stats.logs import ContainerLogStats
from kubelet.status.conditions import need_to_reconcile_pod_readiness
from kubelet.types import (
    API_SOURCE,
    FILE_SOURCE,
    HTTP_SOURCE,
    Pod,
    full_name,
    is_static,
    name,
    namespace,
    object_ref,
    qos_class,
    uid,
)
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.gotime import meta_now
from kubelet.util.mountutil import make_rshared, remove_all_one_filesystem
from kubelet.volumemanager.cache import PodVolumeStates
from kubelet.volumemanager.metrics import ORPHAN_POD_CLEANED_VOLUMES_ERRORS

log = logging.getLogger(__name__)


SYNC_TICK = 1.0
HOUSEKEEPING_PERIOD = 2.0


def checkpoints_dir(node: Node) -> str | None:
    """ContainerCheckpoint: where POST /checkpoint/... writes archives (None: gate off)."""
    if not node.features.enabled(Feature.ContainerCheckpoint):
        return None
    return os.path.join(node.root_dir, CHECKPOINTS_DIR)


class Kubelet:
    """Composition root and loops: builds the subsystems (kubelet_subsystems.py,
    then kubelet_node_subsystems.py) in order, feeds the syncLoop from the pod sources, the PLEG, sync requests
    and the timers, and hands each pod's work to its pod worker. What is done
    to a pod lives in pod_sync.py."""

    def __init__(
        self,
        config: KubeletConfiguration,
        node_name: str,
        root_dir: str,
        runtime_service: RuntimeService,
        image_service: ImageService,
        recorder: AnnotatedRecorder | None = None,
        kube_client: APIClient | None = None,
        node_setup: NodeSetup | None = None,
        runtime_setup: RuntimeSetup | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        """node_setup, runtime_setup: what the command found out about the node
        and the runtime manager's options; left out, as standalone."""
        setup, rs = node_setup or NodeSetup(), runtime_setup or RuntimeSetup()
        self.config, self.root_dir, self.clock = config, root_dir, clock
        self.sandbox_image, self.registered_node = rs.sandbox_image, setup.registered
        node = build_node(config, node_name, root_dir, setup, (recorder, kube_client), clock)
        self.node = node
        # The status manager asks the volume states (a pod's API object is
        # deleted once its volumes are torn down); the volume manager, built
        # later on the same states, tells the status manager of unmounts.
        volume_states = PodVolumeStates(clock)
        # The DRA claims are read before the pods: the status manager holds a
        # pod's terminal phase while its claims are prepared.
        dra_claims = build_dra_claims(node)
        self.pods = pods = build_pods(node, volume_states, dra_claims)
        self.resource_managers = resources = build_resource_managers(node, pods, setup, dra_claims)
        self.volumes = volumes = build_volumes(node, pods, resources, volume_states)
        self.probes = probes = build_probes(node, pods, runtime_service)
        self.runtime = runtime = build_runtime(
            node, pods, volumes, probes, resources, (runtime_service, image_service), rs
        )
        self.workers = workers = build_workers(
            node, pods, volumes, probes, runtime, resources, setup.registered
        )
        self.node_status = build_node_status(
            node, pods, volumes, runtime, workers, resources, setup
        )
        self.admission = build_admission(node, pods, resources, self.node_status)
        self.heartbeat = SyncLoopHeartbeat()
        self.host = build_host(node, pods, runtime, self.node_status, self.heartbeat, resources)
        self.pod_resources = build_pod_resources(node, pods, resources)
        # Container log usage for /metrics, measured as often as volume usage.
        self.log_stats = ContainerLogStats(
            pods.manager.pods, config.pod_logs_dir, config.volume_stats_agg_period
        )
        # The names the loops below (and tests) use.
        self.pod_manager, self.status_manager = pods.manager, pods.status
        self.runtime_manager, self.pleg = runtime.manager, runtime.pleg
        self.evented, self.volume_manager = runtime.evented, volumes.manager
        self.pod_syncer, self.pod_workers = workers.syncer, workers.workers
        self.pod_cgroups = workers.pod_cgroups
        self.stats, self.eviction = self.node_status.stats, self.node_status.eviction
        self.resource_registry = self.host.resource_registry
        self.shutdown, self.node_status_due = self.node_status.shutdown, self.node_status.due
        self.checkpoints_dir = checkpoints_dir(node)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._sources: list[str] = []
        self._background: set[asyncio.Task[None]] = set()
        self.orphans = RuntimeOrphans(runtime.pleg.differ, runtime.manager, pods.cache, self._spawn)

    def readiness(self) -> str | None:
        """Why the node is not Ready, or None (runtime and PLEG health)."""
        return self.node_status.readiness(self.runtime) or self.volumes.csi.readiness()

    # ------------------------------------------------------------ lifecycle
    def _start_sources(self) -> None:
        cfg, pods = self.config, self.pods
        prevent_refs = self.node.features.enabled(Feature.PreventStaticPodAPIReferences)
        if cfg.static_pod_path:
            src = FileSource(
                cfg.static_pod_path,
                self.node.name,
                cfg.file_check_frequency,
                pods.config,
                prevent_refs,
            )
            self._sources.append(FILE_SOURCE)
            self._spawn_task(src.run(self._stop), "file-source")
        if cfg.static_pod_url:
            http = HTTPSource(
                cfg.static_pod_url,
                cfg.static_pod_url_header,
                self.node.name,
                cfg.http_check_frequency,
                pods.config,
                prevent_refs,
            )
            self._sources.append(HTTP_SOURCE)
            self._spawn_task(http.run(self._stop), "http-source")
        if pods.api_source is not None:
            self._sources.append(API_SOURCE)
            lister = self.node_status.lister
            self._spawn_task(lister.run(self._stop), "node-informer")
            self._spawn_task(pods.api_source.run(self._stop, lister.synced), "api-source")
            self._spawn_task(pods.status.run(self._stop), "status-manager")

    def _spawn_task(self, coro: Coroutine[Any, Any, None], task_name: str) -> None:
        """A loop that lives until stop() (cancelled then if still running)."""
        self._tasks.append(asyncio.create_task(coro, name=task_name))

    async def _start_core(self) -> None:
        """What both run() and run_once() need: the pod dirs, the QoS cgroups,
        the runtime's version, the pod sources and the PLEG."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, setup_data_dirs, self.root_dir, self.config.pod_logs_dir)
        try:
            os.makedirs(legacy.CONTAINER_LOGS_DIR, 0o755, exist_ok=True)
        except OSError as err:
            log.warning("No legacy container log links: %s: %s", legacy.CONTAINER_LOGS_DIR, err)
        if self.node.kube_client is not None:
            await self._make_root_shared()
        if self.checkpoints_dir is not None:
            os.makedirs(self.checkpoints_dir, mode=0o700, exist_ok=True)
        if self.pod_cgroups is not None:
            # Fatal as upstream: pods cannot be placed without the QoS tree.
            await loop.run_in_executor(None, self.pod_cgroups.setup_qos)
        await self.runtime.state.wait_for_version(self._stop)
        # Volumes already on disk (a restart, kill -9 included) are adopted
        # before any pod is synced, so they are not set up again.
        await self.volumes.csi.start()  # the CSI dirs first: the manager adopts through them
        await self.volume_manager.reconstruct()
        self._spawn_task(self.volumes.plugins.run(self._stop), "plugin-manager")
        for task_name, coro in self.volumes.csi.loops(self._stop):
            self._spawn_task(coro, task_name)
        self._spawn_task(self.volume_manager.run(self._stop), "volume-manager")
        if self.pods.services is not None:
            self._spawn_task(self.pods.services.run(self._stop), "services")
        if self.pods.runtime_classes is not None:
            self._spawn_task(self.pods.runtime_classes.run(self._stop), "runtimeclasses")
        await self.pleg.prime()  # before the first admission: see GenericPLEG.prime
        self._start_sources()
        self._spawn_task(self.pleg.run(self._stop), "pleg")

    async def _make_root_shared(self) -> None:
        """MakeRShared(root dir), as upstream: mounts a CSI node plugin makes
        in its container (Bidirectional propagation) must reach the host."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, make_rshared, self.root_dir)
        except OSError as err:
            log.error(
                "Could not make the root dir %s a shared mount (%s): CSI node plugins that "
                "mount with Bidirectional propagation will fail to start", self.root_dir, err,
            )  # fmt: skip

    async def _stop_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pod_workers.stop()
        await self.runtime_manager.close()  # the hook runner's HTTP session
        await self.pods.configmaps.close()
        await self.pods.secrets.close()

    def _start_garbage_collection(self, sandbox_image: str) -> GarbageCollectors:
        """StartGarbageCollection, container log rotation."""
        gc = build_gc(self.node, self.pods, self.workers, self.runtime, sandbox_image)
        self._spawn_task(gc.containers.run(self._stop), "container-gc")
        self._spawn_task(gc.images.run(self._stop), "image-gc")
        self._spawn_task(gc.logs.run(self._stop), "container-log-manager")
        return gc

    async def run(self) -> None:
        await self._start_core()
        sandbox_image = self.sandbox_image or await self.runtime.state.sandbox_image()
        gc = self._start_garbage_collection(sandbox_image)
        # One status round before any pod is synced: what the runtime's handlers
        # support (user namespaces) is known to the first hostUsers: false pod.
        await self.runtime.state.check()
        self._spawn_task(self.runtime.state.run(self._stop), "runtime-up")
        self._spawn_task(self.eviction.run(self._stop, gc.reclaimers()), "eviction")
        if self.shutdown is not None:
            self._spawn_task(self.shutdown.run(self._stop), "node-shutdown")
        self._spawn_task(
            self.resource_managers.run(self._stop, self.runtime.manager.runtime), "cpu-manager"
        )
        self._spawn_task(self.volumes.stats.run(self._stop), "volume-stats")
        self._spawn_task(self.log_stats.run(self._stop), "container-log-stats")
        self._spawn_task(self.pod_resources.run(self._stop), "pod-resources")
        if self.evented is not None:
            self._spawn_task(self.evented.run(self._stop), "evented-pleg")
        try:
            await self._sync_loop()
        finally:
            await self._stop_tasks()
            await self.probes.stop()

    async def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------- syncLoop
    async def _sync_loop(self) -> None:
        pod_config, pleg_events, requests = (
            self.pods.config,
            self.pleg.events,
            self.pods.sync_requests,
        )
        updates = asyncio.ensure_future(pod_config.updates.get())
        events = asyncio.ensure_future(pleg_events.get())
        asked = asyncio.ensure_future(requests.wait())
        stopper = asyncio.ensure_future(self._stop.wait())
        clock = self.clock
        next_sync = clock.monotonic() + SYNC_TICK
        next_house = clock.monotonic() + HOUSEKEEPING_PERIOD
        try:
            while not self._stop.is_set():
                now = clock.monotonic()
                self.heartbeat.beat(now)
                timeout = max(0.0, min(next_sync, next_house) - now)
                done, _ = await asyncio.wait(
                    {updates, events, asked, stopper},
                    timeout=timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if updates in done:
                    self.handle_update(updates.result())
                    while not pod_config.updates.empty():
                        self.handle_update(pod_config.updates.get_nowait())
                    updates = asyncio.ensure_future(pod_config.updates.get())
                if events in done:
                    # Drain what the PLEG sent in one go: one wakeup per event would
                    # let a busy relist fill the channel and drop events.
                    self.handle_pleg_event(events.result())
                    while not pleg_events.empty():
                        self.handle_pleg_event(pleg_events.get_nowait())
                    events = asyncio.ensure_future(pleg_events.get())
                if asked in done:
                    self._sync_pods(requests.drain())
                    asked = asyncio.ensure_future(requests.wait())
                now = clock.monotonic()
                if now >= next_sync:
                    next_sync = now + SYNC_TICK
                    self.handle_sync_tick()
                if now >= next_house:
                    next_house = now + HOUSEKEEPING_PERIOD
                    await self.housekeeping()
        finally:
            for f in (updates, events, asked, stopper):
                f.cancel()

    def handle_update(self, u: PodUpdate) -> None:
        self._handle_pods(u)
        # Ready once this update is handled, as upstream (AddSource after the
        # handler): admitting the first pods of a restart must not see the
        # others as gone (the CPU and memory managers would release their state).
        seen = self.pods.config.sources_seen
        if u.source in self._sources and u.source in seen:
            if all(s in seen for s in self._sources):
                self.pods.sources_ready.set()

    def _handle_pods(self, u: PodUpdate) -> None:
        for pod in u.pods:
            if is_mirror(pod):
                self._handle_mirror(u.op, pod)
            elif u.op is Op.ADD:
                self._handle_add(pod)
            elif u.op is Op.REMOVE:
                self._handle_remove(pod)
            else:
                self._handle_change(u.op, pod)

    def _handle_add(self, pod: Pod) -> None:
        pu = uid(pod)
        if pod["metadata"].get("deletionTimestamp"):
            # Seen for the first time while already being deleted (say, after a
            # kubelet restart): stop whatever runs for it, never start it.
            self.pod_manager.add_or_update(pod)
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
            self.status_manager.enqueue(pu)
            return
        self.pod_syncer.pod_seen(pu)
        self.pod_manager.add_or_update(pod)
        # After a restart the checkpointed allocation, not the spec, is what
        # was admitted (a resize may be pending): admission counts that, or
        # what the runtime still runs where larger (a shrink not done yet).
        allocated = self.pods.allocation.allocated_pod(pod)
        rejection = self.admission.admit(self.pods.allocation.admitted_size(pod))
        if rejection is not None:
            self._reject(pod, rejection)
            return
        alloc = self.pods.allocation
        alloc.set_allocated(allocated)
        # A restarted kubelet takes up the resize conditions the API shows.
        alloc.conditions.backfill(pu, (pod.get("status") or {}).get("conditions") or [])
        if allocated is not pod:
            self._resize(pod, TRIGGER_PODS_ADDED)
        self.pod_workers.update_pod(PodWork(pod, UpdateType.CREATE))

    def _handle_change(self, op: Op, pod: Pod) -> None:
        """UPDATE, RECONCILE and DELETE: the pod is kept as the source now has it."""
        pu, rejected = uid(pod), uid(pod) in self.pods.rejected
        if op is Op.UPDATE:
            self.pods.allocation.record_requested(self.pod_manager.get(pu), pod)
        self.pod_manager.add_or_update(pod)
        if op is Op.UPDATE:
            if not rejected:
                self._resize(pod)
                self.pod_workers.update_pod(PodWork(pod, UpdateType.UPDATE))
        elif op is Op.RECONCILE:
            # Only the API status changed (mostly our own writes coming back):
            # the status manager reconciles drift itself; a sync is due only
            # when a readiness gate's condition moved (HandlePodReconcile).
            if not rejected and need_to_reconcile_pod_readiness(pod):
                self.pod_workers.update_pod(PodWork(pod, UpdateType.UPDATE))
            else:
                self.pod_workers.refresh_pod(pod)
        elif op is Op.DELETE:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            if not rejected:  # a refused pod never ran: nothing to kill
                self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
            # A pod with nothing running is deleted from the API right away.
            self.status_manager.enqueue(pu)

    def _handle_remove(self, pod: Pod) -> None:
        pu = uid(pod)
        self.pod_manager.remove(pod)
        self.pods.admitter.release(pu)
        self.resource_managers.remove_pod(pu)
        self.pods.rejected.discard(pu)
        self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, removed=True))
        self.pods.allocation.remove_pod(pu)
        # Its figures from the last measuring pass are not served any more.
        self.volumes.stats.forget(pu)
        self.log_stats.forget(pu)
        # What it held is free: deferred resizes may fit now.
        alloc = self.pods.allocation
        self._sync_pods(alloc.retry_pending(self.pod_manager.get, TRIGGER_PODS_REMOVED))

    def _resize(self, pod: Pod, trigger: str = TRIGGER_POD_UPDATED) -> None:
        """A changed spec of an admitted pod: accept, defer or refuse its resize
        (handlePodResourcesResize); the pod's status shows which."""
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            return
        self.pods.allocation.handle_resize(pod, trigger)

    def _reject(self, pod: Pod, r: Rejection) -> None:
        u = uid(pod)
        self.pods.rejected.add(u)
        log.warning("Pod %s/%s rejected: %s: %s", namespace(pod), name(pod), r.reason, r.message)
        if self.node.recorder is not None:
            self.node.recorder.event(object_ref(pod), "Warning", r.reason, r.message)
        # rejectPod: only the QoS class is kept; startTime as any first status has.
        self.status_manager.set_pod_status(
            u,
            {
                "phase": "Failed",
                "reason": r.reason,
                "message": f"Pod was rejected: {r.message}",
                "conditions": [],
                "qosClass": qos_class(pod),
                "startTime": meta_now(),
            },
            pod,
        )

    def _handle_mirror(self, op: Op, mirror: Pod) -> None:
        """Mirror pods are never run; their static pod is synced so it can fix them."""
        if op is Op.REMOVE:
            self.pod_manager.remove_mirror(mirror)
        else:
            self.pod_manager.set_mirror(mirror)
        static = self.pod_manager.get_by_full_name(full_name(mirror))
        if static is not None and is_static(static):
            self.pod_workers.update_pod(PodWork(static, UpdateType.SYNC))
            self.status_manager.enqueue(uid(static))

    def pod_counts(self) -> metrics.PodCounts:
        """Desired, active and mirror pods, for /metrics (read at scrape time)."""
        desired = self.pod_manager.pods()
        active = self.node_status.active_pods()
        static = sum(1 for p in desired if is_static(p))
        active_static = sum(1 for p in active if is_static(p))
        return metrics.PodCounts(
            len(desired) - static, static, len(active) - active_static, active_static,
            len(self.pod_manager.mirrors()),
        )  # fmt: skip

    def _sync_pods(self, uids: list[str]) -> None:
        for u in uids:
            pod = self.pod_manager.get(u)
            if pod is not None:
                self.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))

    def handle_pleg_event(self, ev: PodLifecycleEvent) -> None:
        self._sync_pods([ev.pod_uid])

    def handle_sync_tick(self) -> None:
        self._sync_pods(self.pods.work_queue.get_work())

    # ---------------------------------------------------------- housekeeping
    async def housekeeping(self) -> None:
        """HandlePodCleanups: stop what no source wants any more, clean up after it."""
        desired = self.pod_manager.uids()
        working = self.pod_workers.sync_known_pods(desired)
        if not self.pods.sources_ready.is_set() and self._sources:
            return  # never judge runtime pods before every source has spoken
        self._restart_reused_uids(desired - working.keys() - self.pods.rejected, working)
        workers = set(working)
        self.orphans.kill(
            desired, workers, self.pod_manager.generation, self.pod_workers.generation
        )
        metrics.set_working_pods(working_pod_counts(working.values(), len(self.orphans.killing)))
        # User namespace ranges of pods nothing knows any more (their dirs gone).
        self.runtime.userns.cleanup_orphans(desired | workers, self.pleg.differ.pod_ids)
        self.pods.allocation.remove_orphans(desired | workers)
        # Pods that finished free what they held: deferred resizes may fit now
        # (upstream's periodic retry; only the deferred pods are looked at).
        self._sync_pods(self.pods.allocation.retry_pending(self.pod_manager.get, TRIGGER_PERIODIC))
        # Pod dirs of pods that are gone, once the volume manager has torn their
        # volumes down (it answers with the dirs that hold no volume any more).
        loop = asyncio.get_running_loop()
        removable = await self.volume_manager.cleanup_orphaned_pods(desired | workers)
        if removable:
            failed = await loop.run_in_executor(None, self._remove_pod_dirs, removable)
            ORPHAN_POD_CLEANED_VOLUMES_ERRORS.inc(failed)
        if self.pod_cgroups is not None:
            # Cgroups of pods that are gone, including what runtimes leave behind.
            pc = self.pod_cgroups
            keep = desired | workers | self.orphans.killing
            await loop.run_in_executor(None, lambda: [pc.destroy_name(n) for n in pc.orphans(keep)])
        for m in self.pod_manager.mirrors():
            fn = full_name(m)
            static = self.pod_manager.get_by_full_name(fn)
            if static is not None and is_static(static):
                continue
            if not self.pod_workers.is_pod_for_mirror_pod_terminating_by_full_name(fn):
                self._spawn(self.pod_syncer.delete_orphaned_mirror(m))
        self.runtime_manager.crash_backoff.gc()
        self.runtime_manager.image_backoff.gc()

    def _restart_reused_uids(self, unknown: set[str], working: dict[str, WorkerSync]) -> None:
        """Pods a source wants that no worker knows: removed and added again
        with the same UID (a static pod's manifest deleted and written back),
        their finished worker just purged. They start again (HandlePodCleanups),
        handled as a new addition: the old pod's cleanup released its admission.
        The only path on which a UID runs a second time."""
        for u in unknown:
            pod = self.pod_manager.get(u)
            if pod is None:
                continue
            log.info("Pod %s/%s restarts: added again with UID %s", namespace(pod), name(pod), u)
            self._handle_add(pod)
            if u in self.pod_workers.known():  # not refused by admission this time
                static = is_static(pod)
                metrics.RESTARTED_PODS.labels("true" if static else "").inc()
                working[u] = WorkerSync("sync", False, static)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """A one-off task the loop does not wait for."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _remove_pod_dirs(self, uids: list[str]) -> int:
        """Remove the pods' dirs; answers how many could not be removed."""
        failed = 0
        for u in uids:
            # Never through a mount point: one left under a pod dir may be a hostPath.
            try:
                remove_all_one_filesystem(os.path.join(self.root_dir, "pods", u))
            except OSError as err:
                failed += 1
                log.warning("Failed removing the directory of pod %s: %s", u, err)
        return failed

    # -------------------------------------------------------------- runonce
    async def run_once(self, timeout: float = 60.0) -> list[Pod]:
        """--runonce: start the static pods, wait until each runs or ends, report."""
        await self._start_core()
        loop_task = asyncio.create_task(self._sync_loop())
        try:
            deadline = self.clock.monotonic() + timeout
            while self.clock.monotonic() < deadline:
                await asyncio.sleep(0.2)
                if not self.pods.sources_ready.is_set() and self._sources:
                    continue
                pods = self.host.get_pods()
                phases = [p.get("status", {}).get("phase") for p in pods]
                if all(ph in ("Running", "Succeeded", "Failed") for ph in phases):
                    return pods
            return self.host.get_pods()
        finally:
            self._stop.set()
            await asyncio.gather(loop_task, return_exceptions=True)
            await self._stop_tasks()
