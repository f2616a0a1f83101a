"""Node-pressure eviction (pkg/kubelet/eviction), the parts a node needs to stay up:

- signals every 10 s (signals.py): memory.available (MemTotal less the root
  cgroup's working set), allocatableMemory.available (the kubepods cgroup,
  when enforceNodeAllocatable has `pods`), nodefs / imagefs / containerfs
  available bytes and free inodes (the kubelet root directory's filesystem and
  the runtime's ImageFsInfo), pid.available;
- thresholds from evictionHard (and evictionSoft with its grace periods), as
  quantities or percentages of capacity; containerfs thresholds derived from
  nodefs's or imagefs's by the disk layout (thresholds.py);
- node conditions MemoryPressure / DiskPressure / PIDPressure, held for
  evictionPressureTransitionPeriod after the signal recovers;
- evictionMinimumReclaim: a threshold acted on stays met until its value plus
  the minimum reclaim is available;
- a disk threshold is first met by node-level reclaim (dead containers, unused
  images, as the disk layout says); pods are evicted only when the signals
  read again still meet a threshold;
- at most one pod evicted per cycle while a threshold is met: critical pods
  never; otherwise pods using more than they request first, then lower
  priority, then larger usage above request, as upstream ranks memory (for
  disk, the pod's bytes on the pressed filesystem against its
  ephemeral-storage request, thresholds.disk_rank; for inode signals its
  inodes there, against no request); the pod is killed (grace 1 s for hard thresholds; for soft, evictionMaxPodGracePeriod
  or the pod's terminationGracePeriodSeconds when shorter), reported Failed
  with reason Evicted and an Evicted event;
- admission under memory pressure refuses BestEffort pods (reason Evicted);
  under disk or PID pressure every pod but critical ones;
- local ephemeral storage limits (local_storage.py), enforced before the node's
  signals every pass unless localStorageCapacityIsolation is false: every pod
  over an emptyDir sizeLimit, its containers' total or a container's own limit
  is evicted at once (grace 1 s), with upstream's messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubelet import metrics
from kubelet.apis.config import KubeletConfiguration
from kubelet.events import AnnotatedRecorder
from kubelet.eviction import local_storage
from kubelet.eviction.memcg_notifier import REFRESH_INTERVAL, MemcgCgroups, memory_notifiers
from kubelet.eviction.message import PodUsage, eviction_message
from kubelet.eviction.signals import DiskLayout, Observation, shared_layout
from kubelet.eviction.thresholds import (
    ALL,
    CONDITIONS,
    CONTAINER_GC,
    MEMORY_SIGNALS,
    RESOURCES,
    VOLUMES,
    Threshold,
    disk_rank,
    reclaim_plan,
    thresholds,
    with_container_fs,
)
from kubelet.lifecycle.predicate import Rejection
from kubelet.resourcehelper import resource_request
from kubelet.stats.ephemeral import PodStorage, is_local_ephemeral_volume
from kubelet.types import (
    Pod,
    PodCondition,
    is_critical,
    name,
    namespace,
    object_ref,
    qos_class,
    uid,
)

log = logging.getLogger(__name__)

MONITORING_PERIOD = 10.0
# The taint the node lifecycle controller sets under MemoryPressure.
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


__all__ = [
    "EvictionManager",
    "EvictionSources",
    "Observation",
    "Reclaimers",
    "Threshold",
    "thresholds",
    "volumes_only",
]

# Hard thresholds and local storage: how long an evicted pod gets to stop.
IMMEDIATE_GRACE = local_storage.IMMEDIATE_GRACE


def eviction_grace(t: Threshold, pod: Pod, max_pod_grace: int) -> int:
    """Hard: immediate; soft: evictionMaxPodGracePeriod, or the pod's own
    terminationGracePeriodSeconds when that is shorter."""
    if t.hard:
        return IMMEDIATE_GRACE
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return min(max_pod_grace, int(own)) if own is not None else max_pod_grace


@dataclass(frozen=True)
class EvictionSources:
    """What the manager reads each pass. `observe` reads every signal
    (blocking: it runs in an executor); `usage` gives each pod UID's memory
    working set from one stats pass (pods without figures are absent), so
    ranking never reads stats once per pod; `layout` tells where the
    filesystems are once known (None: one filesystem, the root directory's);
    `processes` gives the tasks of each pod UID (PID pressure ranks by them);
    `container_usage` the memory working set of each running container of one
    pod, by name (what the eviction message blames; None: not measured)."""

    pods: Callable[[], list[Pod]]  # active (admitted, not terminal) pods
    observe: Callable[[], dict[str, Observation]]
    usage: Callable[[], Mapping[str, int]]
    local_storage: LocalStorageUsage
    layout: Callable[[], Awaitable[DiskLayout | None]] | None = None
    processes: Callable[[], Mapping[str, int]] | None = None
    container_usage: Callable[[Pod], Mapping[str, int]] | None = None


class EvictionManager:
    def __init__(
        self,
        config: KubeletConfiguration,
        root_dir: str,
        sources: EvictionSources,
        evict: EvictFn,
        *,
        recorder: AnnotatedRecorder | None = None,
        node_event: Callable[[str, str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        memcg: MemcgCgroups | None = None,
    ) -> None:
        """`evict(pod, grace, reason, message[, condition])` kills a pod;
        `node_event(type, reason, message)` records an event on the Node;
        `memcg`: where the kernel memcg notifier watches
        (kernelMemcgNotification), None for none."""
        self.config = config
        self.sources = sources
        # localStorageCapacityIsolation: false turns local storage eviction off.
        self.local_storage_isolation = config.local_storage_capacity_isolation
        self.configured = thresholds(config)
        # Until the disk layout is known: one filesystem holds everything.
        self.layout: DiskLayout | None = None
        self.thresholds = with_container_fs(self.configured, shared_layout(root_dir))
        self.reclaim_plan = reclaim_plan(shared_layout(root_dir))
        self.node_event = node_event
        self.evict = evict
        self.recorder = recorder
        self.clock = clock
        self._met_since: dict[str, float] = {}  # soft thresholds: first seen met
        self._pressure_until: dict[str, float] = {}  # condition -> held until
        # Thresholds acted on in the last pass (met past their grace period):
        # they hold until their minimum reclaim is available too.
        self._acting: set[str] = set()
        # UIDs of pods this manager evicted that are still active: they are not
        # picked twice, and they leave the set once they are gone.
        self.evicted: set[str] = set()
        # kernelMemcgNotification: a crossing wakes the loop for a pass at once.
        self._wake = asyncio.Event()
        self.notifiers = (
            []
            if memcg is None
            else memory_notifiers(self.configured, *memcg, crossed=self._crossed)
        )
        self._notifiers_at = -REFRESH_INTERVAL

    # -------------------------------------------------------------- queries
    def under(self, condition: str) -> bool:
        return self._pressure_until.get(condition, 0.0) > self.clock()

    def admit(self, pod: Pod) -> Rejection | None:
        """Critical pods always get in. Under memory pressure alone, BestEffort pods
        are refused unless they tolerate the memory-pressure taint; under disk or
        PID pressure every other pod is refused."""
        conds = [c for c in ("MemoryPressure", "DiskPressure", "PIDPressure") if self.under(c)]
        if not conds or is_critical(pod):
            return None
        if conds == ["MemoryPressure"] and (
            qos_class(pod) != "BestEffort" or _tolerates_memory_pressure(pod)
        ):
            return None
        return Rejection("Evicted", f"The node had condition: [{' '.join(conds)}].")

    # ---------------------------------------------------------------- loop
    async def run(self, stop: asyncio.Event, reclaim: Reclaimers | None = None) -> None:
        """Every MONITORING_PERIOD until `stop`; `reclaim` frees disk without
        evicting (None: no garbage collectors, disk pressure evicts at once)."""
        while not stop.is_set():
            try:
                await self.synchronize(reclaim)
            except Exception:  # the node must stay watched: the next pass runs on time
                log.exception("eviction manager: synchronize failed")
            await self._wait(stop)
        loop = asyncio.get_running_loop()
        for n in self.notifiers:
            n.stop(loop)

    async def _wait(self, stop: asyncio.Event) -> None:
        """Until the next pass: MONITORING_PERIOD, a memcg crossing, or `stop`."""
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        await asyncio.wait(waits, timeout=MONITORING_PERIOD, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        self._wake.clear()

    def _crossed(self, message: str) -> None:
        log.info("%s", message)
        self._wake.set()

    def _refresh_notifiers(self, obs: Mapping[str, Observation], now: float) -> None:
        """The notifiers' levels from this pass's figures, at most every 10 s."""
        if not self.notifiers or now - self._notifiers_at < REFRESH_INTERVAL:
            return
        self._notifiers_at = now
        loop = asyncio.get_running_loop()
        for n in self.notifiers:
            o = obs.get(n.threshold.signal)
            if o is not None:
                n.update(o, loop)

    async def _evict_local_storage(self, pods: list[Pod]) -> list[Pod]:
        """localStorageEviction: every pod over one of its own local storage limits
        is evicted at once, whatever the node's signals say."""
        if not self.local_storage_isolation:
            return []
        candidates = [
            p
            for p in pods
            if uid(p) not in self.evicted and not is_critical(p) and local_storage.has_limits(p)
        ]
        if not candidates:
            return []
        usage = await self.sources.local_storage(candidates)
        evicted = []
        for p in candidates:
            measured = usage.get(uid(p))
            found = local_storage.violated(p, measured) if measured is not None else None
            if found is None:
                continue
            signal, message = found
            metrics.EVICTIONS.labels(signal).inc()
            log.warning("Evicting pod %s/%s: %s", namespace(p), name(p), message)
            if self.recorder is not None:
                self.recorder.event(object_ref(p), "Warning", "Evicted", message)
            self.evicted.add(uid(p))
            await self.evict(p, IMMEDIATE_GRACE, "Evicted", message)
            evicted.append(p)
        return evicted

    async def _learn_layout(self) -> None:
        """Once the runtime has told where its filesystems are, containerfs
        thresholds and node-level reclaim follow that layout."""
        if self.layout is not None or self.sources.layout is None:
            return
        found = await self.sources.layout()
        if found is None:
            return
        self.layout = found
        self.thresholds = with_container_fs(self.configured, found)
        self.reclaim_plan = reclaim_plan(found)

    def _met(self, obs: Mapping[str, Observation], now: float) -> list[Threshold]:
        """Thresholds met past their grace period (those acted on last time
        count as met until their minimum reclaim is free too); updates the
        node conditions."""
        met: list[Threshold] = []
        for t in self.thresholds:
            o = obs.get(t.signal)
            if o is None or o.available >= t.limit(o.capacity, t.key in self._acting):
                self._met_since.pop(t.key, None)
                continue
            since = self._met_since.setdefault(t.key, now)
            cond = CONDITIONS.get(t.signal)
            if cond:
                self._pressure_until[cond] = now + self.config.eviction_pressure_transition_period
            if t.hard or now - since >= t.grace:
                met.append(t)
        self._acting = {t.key for t in met}
        # Memory first, then as configured (hard before soft), as upstream ranks them.
        met.sort(key=lambda t: t.signal not in MEMORY_SIGNALS)
        return met

    async def _observe(self) -> dict[str, Observation]:
        return await asyncio.get_running_loop().run_in_executor(None, self.sources.observe)

    async def synchronize(self, reclaim: Reclaimers | None = None) -> Pod | None:
        """One pass: update conditions; reclaim node-level resources or evict
        one pod if a threshold is met."""
        pods = self.sources.pods()
        self.evicted.intersection_update(uid(p) for p in pods)
        local = await self._evict_local_storage(pods)
        if local:
            return local[0]
        await self._learn_layout()
        observed_at = self.clock()
        obs = await self._observe()
        self._refresh_notifiers(obs, self.clock())
        met = self._met(obs, self.clock())
        if not met:
            return None
        t, o = met[0], obs[met[0].signal]
        resource = RESOURCES.get(t.signal, t.signal)
        log.info("eviction: attempting to reclaim %s (%s)", resource, t.signal)
        if self.node_event is not None:
            self.node_event("Warning", "EvictionThresholdMet", f"Attempting to reclaim {resource}")
        if await self._reclaim_node_level(t, reclaim):
            return None
        victim, ranked_by = await self._victim(t, pods)
        if victim is None:
            log.warning("eviction threshold %s met, but no pod can be evicted", t.signal)
            return None
        usage = await self._usage_of(t, victim, ranked_by)
        message, annotations = eviction_message(t, o, victim, usage)
        grace = eviction_grace(t, victim, int(self.config.eviction_max_pod_grace_period))
        log.warning("Evicting pod %s/%s: %s", namespace(victim), name(victim), message)
        if self.recorder is not None:
            self.recorder.annotated_event(
                object_ref(victim), annotations, "Warning", "Evicted", message
            )
        self.evicted.add(uid(victim))
        metrics.EVICTIONS.labels(t.signal).inc()
        await self.evict(victim, grace, "Evicted", message, condition=disruption_target(message))
        metrics.EVICTION_STATS_AGE.labels(t.signal).observe(max(0.0, self.clock() - observed_at))
        return victim

    async def _reclaim_node_level(self, t: Threshold, reclaim: Reclaimers | None) -> bool:
        """Frees what the layout says may be freed for this signal (dead
        containers, unused images), then reads the signals again: True when no
        threshold is met any more (minimum reclaim included), so no pod goes."""
        steps = self.reclaim_plan.get(t.signal, ())
        if not steps:
            return False
        if reclaim is None:
            log.warning("eviction: %s met and node-level reclaim (%s) is not running: "
                        "evicting without it", t.signal, ", ".join(steps))  # fmt: skip
            return False
        for step in steps:
            problem = await (reclaim.containers() if step == CONTAINER_GC else reclaim.images())
            if problem is not None:
                log.warning("eviction: reclaiming %s for %s failed: %s", step, t.signal, problem)
        obs = await self._observe()
        still = [
            x.signal
            for x in self.thresholds
            if x.signal in obs and obs[x.signal].available < x.limit(obs[x.signal].capacity, True)
        ]
        if still:
            log.info("eviction: after reclaiming %s, still met: %s", ", ".join(steps),
                     ", ".join(still))  # fmt: skip
            return False
        log.info("eviction: %s relieved by reclaiming %s, no pod evicted", t.signal,
                 ", ".join(steps))  # fmt: skip
        return True

    async def _victim(self, t: Threshold, pods: list[Pod]) -> tuple[Pod | None, Mapping[str, int]]:
        """The pod to evict, and the figures (by pod UID) it was ranked by."""
        if CONDITIONS.get(t.signal) == "DiskPressure":
            # Inodes: no pod requests any, so any use counts as above request.
            request = _no_request if RESOURCES.get(t.signal) == "inodes" else _ephemeral_request
            usage: Mapping[str, int] = await self._disk_usage(t, pods)
            return self._rank(pods, usage, request), usage
        loop = asyncio.get_running_loop()
        if CONDITIONS.get(t.signal) == "PIDPressure" and self.sources.processes is not None:
            # rankPIDPressure: lower priority first, then more processes.
            usage = await loop.run_in_executor(None, self.sources.processes)
            return self._rank(pods, usage, _no_request), usage
        usage = await loop.run_in_executor(None, self.sources.usage)
        return self._rank(pods, usage, _memory_request), usage

    async def _usage_of(
        self, t: Threshold, victim: Pod, ranked_by: Mapping[str, int]
    ) -> PodUsage | None:
        """What the eviction message reads of the victim: its containers' use of
        the starved resource (memory, or local storage); none for inodes and
        PIDs, which no container requests. None: the pod was not measured."""
        resource = RESOURCES.get(t.signal)
        if resource == "memory":
            if self.sources.container_usage is None or uid(victim) not in ranked_by:
                return None
            loop = asyncio.get_running_loop()
            containers = await loop.run_in_executor(None, self.sources.container_usage, victim)
            return PodUsage(containers, ranked_by[uid(victim)])
        if resource == "ephemeral-storage":
            measured = (await self.sources.local_storage([victim])).get(uid(victim))
            return None if measured is None else PodUsage(measured.containers)
        return PodUsage() if uid(victim) in ranked_by else None

    async def _disk_usage(self, t: Threshold, pods: list[Pod]) -> dict[str, int]:
        """Each candidate's bytes (inodes, for an inode signal) on the pressed
        filesystem (the layout says which part of its local storage is there)."""
        candidates = [p for p in pods if not is_critical(p) and uid(p) not in self.evicted]
        measured = await self.sources.local_storage(candidates)
        part = disk_rank(self.layout or shared_layout(""), t.signal)
        inodes = RESOURCES.get(t.signal) == "inodes"
        out: dict[str, int] = {}
        for p in candidates:
            st = measured.get(uid(p))
            if st is None:
                continue
            use = st.inodes if inodes else st
            if part == ALL:
                out[uid(p)] = use.total
            elif part == VOLUMES:
                out[uid(p)] = _local_volumes(p, use.volumes)
            else:
                out[uid(p)] = sum(use.containers.values())
        return out

    def _rank(
        self, pods: list[Pod], usage: Mapping[str, int], request: Callable[[Pod], int]
    ) -> Pod | None:
        """Pods over their requests first, then lower priority, then more above request.
        Critical pods (static, or system-critical priority) are never chosen: a
        node-critical pod such as a CSI or CNI plugin going would take the node's
        volumes or network with it."""
        best: tuple[Any, ...] | None = None
        victim = None
        for p in pods:
            if is_critical(p) or uid(p) in self.evicted:
                continue
            used = usage.get(uid(p), 0)
            req = request(p)
            priority = int((p.get("spec") or {}).get("priority") or 0)
            key = (not used > req, priority, -(used - req))
            if best is None or key < best:
                best, victim = key, p
        return victim


def _tolerates_memory_pressure(pod: Pod) -> bool:
    """A toleration matching the node.kubernetes.io/memory-pressure:NoSchedule taint."""
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if op == "Exists" and key in ("", MEMORY_PRESSURE_TAINT):
            return True
        if op == "Equal" and key == MEMORY_PRESSURE_TAINT and not t.get("value"):
            return True
    return False


class EvictFn(Protocol):
    """Kill the pod with this grace and report it Failed with reason and message;
    `condition` (a pod condition) goes into its status too."""

    def __call__(
        self, pod: Pod, grace: int, reason: str, message: str,
        condition: PodCondition | None = None,
    ) -> Awaitable[None]: ...  # fmt: skip


def disruption_target(message: str) -> PodCondition:
    """The DisruptionTarget condition a node-pressure eviction adds (local storage
    evictions add none, as upstream)."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": message,
    }


LocalStorageUsage = Callable[[list[Pod]], Awaitable[Mapping[str, PodStorage]]]
# A node-level reclaim: None when it ran, else what went wrong.
ReclaimFn = Callable[[], Awaitable[str | None]]


@dataclass(frozen=True)
class Reclaimers:
    """The garbage collectors' eviction entry points: DeleteAllUnusedContainers
    (every dead container, whatever the GC policy keeps) and DeleteUnusedImages."""

    containers: ReclaimFn
    images: ReclaimFn


def _local_volumes(pod: Pod, used: Mapping[str, int]) -> int:
    """Bytes in the pod's local ephemeral volumes (emptyDir on disk, configMap, gitRepo)."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return sum(used.get(v.get("name", ""), 0) for v in volumes if is_local_ephemeral_volume(v))


def volumes_only(volume_usage: Callable[[str], Mapping[str, int]]) -> LocalStorageUsage:
    """Usage from the volume stats alone (no runtime to ask: the containers'
    own bytes are unknown; the pod's total is its local volumes)."""

    async def usage(pods: list[Pod]) -> Mapping[str, PodStorage]:
        out = {}
        for p in pods:
            used = dict(volume_usage(uid(p)))
            out[uid(p)] = PodStorage(used, {}, _local_volumes(p, used))
        return out

    return usage


def _no_request(_pod: Pod) -> int:
    return 0


def _memory_request(pod: Pod) -> int:
    return resource_request(pod, "memory")


def _ephemeral_request(pod: Pod) -> int:
    """GetResourceRequest: the containers' aggregate (sidecars included); with
    pod-level resources set, upstream reads the pod level alone, where
    ephemeral-storage cannot be set, so 0."""
    return resource_request(pod, "ephemeral-storage")
