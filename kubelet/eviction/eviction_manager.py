"""Node-pressure eviction (pkg/kubelet/eviction), the parts a node needs to stay up:

- signals every 10 s: memory.available (MemAvailable), nodefs.available and
  nodefs.inodesFree (statvfs of the root directory; imagefs is the same
  filesystem here), pid.available (pid_max minus processes), read with the
  Cython parsers;
- thresholds from evictionHard (and evictionSoft with its grace periods), as
  quantities or percentages of capacity;
- node conditions MemoryPressure / DiskPressure / PIDPressure, held for
  evictionPressureTransitionPeriod after the signal recovers;
- evictionMinimumReclaim: a threshold acted on stays met until its value plus
  the minimum reclaim is available;
- at most one pod evicted per cycle while a threshold is met: static pods never;
  otherwise pods using more than they request first, then lower priority, then
  larger usage above request, as upstream ranks memory; the pod is killed
  (grace 1 s for hard thresholds; for soft, evictionMaxPodGracePeriod or the
  pod's terminationGracePeriodSeconds when shorter), reported
  Failed with reason Evicted and an Evicted event;
- admission under memory pressure refuses BestEffort pods (reason Evicted);
- local ephemeral storage limits (local_storage.py), enforced before the node's
  signals every pass unless localStorageCapacityIsolation is false: every pod
  over an emptyDir sizeLimit, its containers' total or a container's own limit
  is evicted at once (grace 1 s), with upstream's messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubelet import metrics, stats
from kubelet.eviction import local_storage
from kubelet.lifecycle.predicate import Rejection, pod_requests
from kubelet.stats.ephemeral import PodStorage
from kubelet.types import (
    Container,
    Pod,
    PodCondition,
    is_critical,
    name,
    namespace,
    object_ref,
    qos_class,
    uid,
)
from kubelet.util.duration import parse_duration
from kubelet.util.quantity import parse_quantity, to_bytes

log = logging.getLogger(__name__)

MONITORING_PERIOD = 10.0
# The taint the node lifecycle controller sets under MemoryPressure.
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"
# signal -> the node condition it drives
CONDITIONS = {
    "memory.available": "MemoryPressure",
    "nodefs.available": "DiskPressure",
    "nodefs.inodesFree": "DiskPressure",
    "imagefs.available": "DiskPressure",
    "imagefs.inodesFree": "DiskPressure",
    "pid.available": "PIDPressure",
}
RESOURCE = {"MemoryPressure": "memory", "DiskPressure": "ephemeral-storage", "PIDPressure": "pids"}


@dataclass
class Observation:
    available: int
    capacity: int


@dataclass
class Threshold:
    signal: str
    value: str  # "100Mi" or "10%"
    hard: bool
    grace: float = 0.0
    # evictionMinimumReclaim: once acted on, the threshold holds until this much
    # more than its value is available again.
    min_reclaim: str | None = None

    def limit(self, capacity: int, reclaiming: bool = False) -> float:
        out = _amount(self.value, capacity)
        if reclaiming and self.min_reclaim is not None:
            out += _amount(self.min_reclaim, capacity)
        return out

    @property
    def key(self) -> str:
        return self.signal + str(self.hard)


def _amount(value: str, capacity: int) -> float:
    if value.endswith("%"):
        return capacity * float(value[:-1]) / 100.0
    return float(parse_quantity(value))


def thresholds(config: Any) -> list[Threshold]:
    reclaim = config.eviction_minimum_reclaim or {}
    out = [
        Threshold(s, v, True, 0.0, reclaim.get(s)) for s, v in (config.eviction_hard or {}).items()
    ]
    for s, v in (config.eviction_soft or {}).items():
        grace = (config.eviction_soft_grace_period or {}).get(s, "0s")
        out.append(Threshold(s, v, False, parse_duration(grace), reclaim.get(s)))
    return out


# Hard thresholds and local storage: how long an evicted pod gets to stop.
IMMEDIATE_GRACE = local_storage.IMMEDIATE_GRACE


def eviction_grace(t: Threshold, pod: Pod, max_pod_grace: int) -> int:
    """Hard: immediate; soft: evictionMaxPodGracePeriod, or the pod's own
    terminationGracePeriodSeconds when that is shorter."""
    if t.hard:
        return IMMEDIATE_GRACE
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return min(max_pod_grace, int(own)) if own is not None else max_pod_grace


def observe(root_dir: str) -> dict[str, Observation]:
    """The node's signals now."""
    obs: dict[str, Observation] = {}
    mi = stats.read_meminfo()
    if mi and mi.get("MemTotal") and mi.get("MemAvailable") is not None:
        obs["memory.available"] = Observation(
            int(mi["MemAvailable"] or 0), int(mi["MemTotal"] or 0)
        )
    fs = stats.fs_usage(root_dir)
    if fs:
        obs["nodefs.available"] = Observation(fs["available"], fs["capacity"])
        obs["nodefs.inodesFree"] = Observation(fs["inodes_free"], fs["inodes"])
        obs["imagefs.available"] = obs["nodefs.available"]
        obs["imagefs.inodesFree"] = obs["nodefs.inodesFree"]
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            pid_max = int(fh.read())
        procs = sum(1 for e in os.listdir("/proc") if e.isdigit())
        obs["pid.available"] = Observation(pid_max - procs, pid_max)
    except (OSError, ValueError):
        pass
    return obs


class EvictionManager:
    def __init__(
        self,
        config: Any,
        pods: Callable[[], list[Pod]],
        evict: EvictFn,
        usage: Callable[[], Mapping[str, int]],
        root_dir: str,
        observe_fn: Callable[[], dict[str, Observation]] | None = None,
        recorder: Any = None,
        clock: Callable[[], float] = time.monotonic,
        volume_usage: Callable[[str], Mapping[str, int]] = lambda _uid: {},
        local_storage_usage: LocalStorageUsage | None = None,
    ) -> None:
        self.config = config
        self.local_storage_usage = local_storage_usage or _volumes_only(volume_usage)
        # localStorageCapacityIsolation: false turns local storage eviction off.
        self.local_storage_isolation = bool(
            getattr(config, "local_storage_capacity_isolation", True)
        )
        # pod UID -> volume name -> bytes used (the volume stats' last pass).
        self.volume_usage = volume_usage
        self.thresholds = thresholds(config)
        self.pods = pods  # active (admitted, not terminal) pods
        self.evict = evict  # (pod, grace, reason, message[, condition])
        # pod UID -> memory working set bytes (pods without figures are absent),
        # from one stats pass: ranking never reads stats once per pod.
        self.usage = usage
        self.observe = observe_fn or (lambda: observe(root_dir))
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
    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.synchronize()
            except Exception:  # the node must stay watched: the next pass runs on time
                log.exception("eviction manager: synchronize failed")
            try:
                await asyncio.wait_for(stop.wait(), MONITORING_PERIOD)
            except TimeoutError:
                pass

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
        usage = await self.local_storage_usage(candidates)
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

    async def synchronize(self) -> Pod | None:
        """One pass: update conditions; evict one pod if a threshold is met."""
        pods = self.pods()
        self.evicted.intersection_update(uid(p) for p in pods)
        local = await self._evict_local_storage(pods)
        if local:
            return local[0]
        obs = await asyncio.get_running_loop().run_in_executor(None, self.observe)
        now = self.clock()
        met: list[tuple[Threshold, Observation]] = []
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
                met.append((t, o))
        self._acting = {t.key for t, _ in met}
        if not met:
            return None
        t, o = min(met, key=lambda m: (not m[0].hard, m[1].available))
        if CONDITIONS.get(t.signal) == "DiskPressure":
            # Disk is ranked by the pods' own local storage, not by memory.
            victim = self._rank(pods, {uid(p): self._local_storage(p) for p in pods},
                                _ephemeral_request)  # fmt: skip
        else:
            usage = await asyncio.get_running_loop().run_in_executor(None, self.usage)
            victim = self._rank(pods, usage, lambda p: pod_requests(p).memory)
        if victim is None:
            log.warning("eviction threshold %s met, but no pod can be evicted", t.signal)
            return None
        cond = CONDITIONS.get(t.signal, "")
        resource = RESOURCE.get(cond, t.signal)
        message = (
            f"The node was low on resource: {resource}. Threshold quantity: {t.value}, "
            f"available: {o.available // 1024}Ki."
        )
        grace = eviction_grace(t, victim, int(self.config.eviction_max_pod_grace_period))
        log.warning("Evicting pod %s/%s: %s", namespace(victim), name(victim), message)
        if self.recorder is not None:
            self.recorder.event(object_ref(victim), "Warning", "Evicted", message)
        self.evicted.add(uid(victim))
        metrics.EVICTIONS.labels(t.signal).inc()
        await self.evict(victim, grace, "Evicted", message, condition=disruption_target(message))
        return victim

    def _local_storage(self, pod: Pod) -> int:
        """Bytes in the pod's local ephemeral volumes (emptyDir on disk, configMap,
        downwardAPI, gitRepo), from the volume stats' last pass."""
        used = self.volume_usage(uid(pod))
        total = 0
        for v in (pod.get("spec") or {}).get("volumes") or []:
            ed = v.get("emptyDir")
            local = (ed is not None and ed.get("medium") != "Memory") or any(
                k in v for k in ("configMap", "downwardAPI", "gitRepo")
            )
            if local:
                total += used.get(v.get("name", ""), 0)
        return total

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


def _volumes_only(volume_usage: Callable[[str], Mapping[str, int]]) -> LocalStorageUsage:
    """Usage from the volume stats alone (no runtime to ask: the containers'
    own bytes are unknown, so only emptyDir sizeLimits can be held)."""

    async def usage(pods: list[Pod]) -> Mapping[str, PodStorage]:
        return {uid(p): PodStorage(dict(volume_usage(uid(p))), {}, 0) for p in pods}

    return usage


def _ephemeral_request(pod: Pod) -> int:
    """The pod's ephemeral-storage request: its containers' sum (init containers
    run before and their space is freed, so the largest of them if bigger)."""
    spec = pod.get("spec") or {}

    def req(c: Container) -> int:
        r = (c.get("resources") or {}).get("requests") or {}
        return to_bytes(r.get("ephemeral-storage", 0))

    main = sum(req(c) for c in spec.get("containers") or [])
    return max([main, *(req(c) for c in spec.get("initContainers") or [])])
