"""Container garbage collection (pkg/kubelet/container/container_gc.go and
kuberuntime/kuberuntime_gc.go upstream).

One pass makes one ListContainers and one ListPodSandbox call, whatever the
number of pods, then:

* dead containers (anything not running) created more than ``min_age`` ago are
  grouped per (pod UID, container name). When every pod source is ready, all of
  them are removed for pods that no longer exist. Then each group keeps its
  ``max_per_pod_container`` newest instances, and when ``max_containers`` is
  set the node keeps at most that many: first an equal share per group
  (at least one), then the oldest go across groups. With the defaults (1 per
  container, no node-wide limit) the newest dead instance of each container of
  a pod that still exists stays, so its logs and its lastState survive.
* sandboxes that are not ready and hold no container are removed once their
  pod is gone; for a pod that still exists every such sandbox but the newest.
* pod log directories ``<podLogsDir>/<ns>_<name>_<uid>`` of pods that no longer
  exist are removed when every source is ready.

Removing a container also removes its log file and the rotated ones beside it
(``<log>*``), as upstream's removeContainerLog does.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime.labels import POD_TERMINATION_GRACE, POD_UID

log = logging.getLogger(__name__)

CONTAINER_GC_PERIOD = 60.0  # ContainerGCPeriod upstream
MIN_GRACE_S = 2  # minimumGracePeriodInSeconds: what an unknown container gets to stop

# (etype, reason, message) about the Node; the Kubelet binds it to its node ref.
NodeEvent = Callable[[str, str, str], None]


@dataclass(frozen=True)
class GCPolicy:
    """kubecontainer.GCPolicy: the deprecated flags --minimum-container-ttl-duration,
    --maximum-dead-containers-per-container and --maximum-dead-containers."""

    min_age: float = 0.0  # seconds
    max_per_pod_container: int = 1  # < 0: no limit
    max_containers: int = -1  # < 0: no limit


@dataclass
class GCResult:
    containers: list[str] = field(default_factory=list)
    sandboxes: list[str] = field(default_factory=list)
    log_dirs: list[str] = field(default_factory=list)


class ContainerGCError(Exception):
    """Some step of a pass could not run (a list call or the log dir read failed);
    the other steps still ran."""


@dataclass(slots=True)
class _Dead:
    created: int
    id: str
    unknown: bool
    grace: int


class ContainerGC:
    def __init__(
        self,
        runtime: RuntimeService,
        pod_exists: Callable[[str], bool],
        pod_logs_dir: str,
        policy: GCPolicy | None = None,
        *,
        pod_terminated: Callable[[str], bool] | None = None,
        sources_ready: Callable[[], bool] = lambda: True,
        node_event: NodeEvent | None = None,
        clock: Callable[[], float] = time.time,
        period: float = CONTAINER_GC_PERIOD,
    ) -> None:
        """`pod_exists(uid)` is False once the pod's content may go: it is deleted (or
        unknown) and its workers have finished (ShouldPodContentBeRemoved upstream).
        `pod_terminated(uid)`, used only by ``garbage_collect(evict_non_deleted_pods=True)``
        (the eviction manager's DeleteAllUnusedContainers), is True once the pod's
        containers are stopped for good (ShouldPodRuntimeBeRemoved). `clock` is wall
        time: runtimes report creation times in Unix nanoseconds."""
        self.runtime = runtime
        self.pod_exists = pod_exists
        self.pod_terminated = pod_terminated
        self.pod_logs_dir = pod_logs_dir
        self.policy = policy or GCPolicy()
        self.sources_ready = sources_ready
        self.node_event = node_event
        self.clock = clock
        self.period = period

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then every period until `stop` is set; a failed pass is a
        ContainerGCFailed Warning event on the Node, as upstream."""
        while not stop.is_set():
            try:
                await self.garbage_collect()
            except Exception as err:
                log.error("Container garbage collection failed: %s", err)
                if self.node_event is not None:
                    self.node_event("Warning", "ContainerGCFailed", str(err))
            try:
                await asyncio.wait_for(stop.wait(), self.period)
            except TimeoutError:
                pass

    async def garbage_collect(self, evict_non_deleted_pods: bool = False) -> GCResult:
        result = GCResult()
        problems: list[str] = []
        ready = self.sources_ready()
        containers: list[pb.Container] | None = None
        try:
            containers = await self.runtime.list_containers()
        except errors.CRIError as err:
            problems.append(f"failed to list containers: {err}")
        if containers is not None:
            await self._evict_containers(containers, ready, evict_non_deleted_pods, result)
        try:
            sandboxes = await self.runtime.list_pod_sandbox()
        except errors.CRIError as err:
            problems.append(f"failed to list pod sandboxes: {err}")
        else:
            if containers is not None:
                await self._evict_sandboxes(
                    sandboxes, containers, set(result.containers), evict_non_deleted_pods, result
                )
        if ready:
            try:
                await self._evict_log_dirs(result)
            except OSError as err:
                problems.append(f"failed to read podLogsRootDirectory {self.pod_logs_dir!r}: {err}")
        if result.containers or result.sandboxes or result.log_dirs:
            log.info(
                "Container GC removed %d containers, %d sandboxes, %d pod log dirs",
                len(result.containers),
                len(result.sandboxes),
                len(result.log_dirs),
            )
        if problems:
            raise ContainerGCError("; ".join(problems))
        return result

    # ------------------------------------------------------------ containers
    def _removable(self, uid: str, evict_non_deleted_pods: bool) -> bool:
        if not self.pod_exists(uid):
            return True
        return (
            evict_non_deleted_pods and self.pod_terminated is not None and self.pod_terminated(uid)
        )

    async def _evict_containers(
        self,
        containers: list[pb.Container],
        ready: bool,
        evict_non_deleted_pods: bool,
        result: GCResult,
    ) -> None:
        newest_ns = int((self.clock() - self.policy.min_age) * 1e9)
        running = pb.CONTAINER_RUNNING
        unknown = pb.CONTAINER_UNKNOWN
        units: dict[tuple[str, str], list[_Dead]] = defaultdict(list)
        for c in containers:
            # Most containers of a busy node run: one attribute read each.
            if c.state == running or c.created_at > newest_ns:
                continue
            units[(c.labels.get(POD_UID, ""), c.metadata.name)].append(
                _Dead(c.created_at, c.id, c.state == unknown, _grace(c))
            )
        if not units:
            return
        for group in units.values():
            group.sort(key=lambda d: d.created, reverse=True)  # newest first
        if ready:
            for key in [k for k in units if self._removable(k[0], evict_non_deleted_pods)]:
                group = units.pop(key)
                await self._remove_oldest(group, len(group), result)
        if self.policy.max_per_pod_container >= 0:
            await self._enforce_per_unit(units, self.policy.max_per_pod_container, result)
        limit = self.policy.max_containers
        if limit >= 0 and units and sum(len(g) for g in units.values()) > limit:
            await self._enforce_per_unit(units, max(1, limit // len(units)), result)
            total = sum(len(g) for g in units.values())
            if total > limit:
                flat = [d for g in units.values() for d in g]
                flat.sort(key=lambda d: d.created, reverse=True)
                await self._remove_oldest(flat, total - limit, result)

    async def _enforce_per_unit(
        self, units: dict[tuple[str, str], list[_Dead]], keep: int, result: GCResult
    ) -> None:
        for key, group in units.items():
            if len(group) > keep:
                units[key] = await self._remove_oldest(group, len(group) - keep, result)

    async def _remove_oldest(self, group: list[_Dead], n: int, result: GCResult) -> list[_Dead]:
        """Remove the last `n` of a newest-first list, oldest first. Returns what is
        kept; like upstream, a failed removal still counts as gone for this pass so
        one stuck container does not make the pass remove newer ones instead."""
        keep = max(0, len(group) - n)
        for d in reversed(group[keep:]):
            if await self._remove_container(d):
                result.containers.append(d.id)
        return group[:keep]

    async def _remove_container(self, d: _Dead) -> bool:
        try:
            if d.unknown:
                # It may still run: stop it before removal, as upstream kills it.
                await self.runtime.stop_container(d.id, d.grace)
            await self._remove_container_logs(d.id)
            await self.runtime.remove_container(d.id)
        except errors.NotFoundError:
            return True
        except (errors.CRIError, OSError) as err:
            log.error("Failed to remove container %s: %s", d.id, err)
            return False
        return True

    async def _remove_container_logs(self, cid: str) -> None:
        # The log path is only in the container's status; a removal is rare, a
        # status call per removal is fine (never one per container per pass).
        path = (await self.runtime.container_status(cid)).status.log_path
        if os.path.isabs(path):
            await asyncio.get_running_loop().run_in_executor(None, _remove_glob, path)

    # ------------------------------------------------------------- sandboxes
    async def _evict_sandboxes(
        self,
        sandboxes: list[pb.PodSandbox],
        containers: list[pb.Container],
        removed: set[str],
        evict_non_deleted_pods: bool,
        result: GCResult,
    ) -> None:
        occupied = {c.pod_sandbox_id for c in containers if c.id not in removed}
        ready = pb.SANDBOX_READY
        idle = [s for s in sandboxes if s.state != ready and s.id not in occupied]
        if not idle:
            return
        pods = {s.metadata.uid for s in idle}
        newest: dict[str, tuple[int, str]] = {}
        for s in sandboxes:
            u = s.metadata.uid
            if u in pods:
                cur = newest.get(u)
                if cur is None or s.created_at > cur[0]:
                    newest[u] = (s.created_at, s.id)
        idle.sort(key=lambda s: s.created_at)  # oldest first
        for s in idle:
            u = s.metadata.uid
            if not self._removable(u, evict_non_deleted_pods) and newest[u][1] == s.id:
                continue  # the pod still exists: its newest sandbox stays
            if await self._remove_sandbox(s.id):
                result.sandboxes.append(s.id)

    async def _remove_sandbox(self, sid: str) -> bool:
        try:
            # Normally stopped already; stopping again is a no-op, and it
            # guards against the rare sandbox that was not.
            await self.runtime.stop_pod_sandbox(sid)
            await self.runtime.remove_pod_sandbox(sid)
        except errors.NotFoundError:
            return True
        except errors.CRIError as err:
            log.error("Failed to remove sandbox %s: %s", sid, err)
            return False
        return True

    # -------------------------------------------------------------- log dirs
    async def _evict_log_dirs(self, result: GCResult) -> None:
        loop = asyncio.get_running_loop()
        try:
            names = await loop.run_in_executor(None, os.listdir, self.pod_logs_dir)
        except FileNotFoundError:
            return
        # <namespace>_<name>_<uid>: names and namespaces cannot hold "_", UIDs neither.
        gone = [n for n in names if not self.pod_exists(n.rsplit("_", 1)[-1])]
        for name in gone:
            path = os.path.join(self.pod_logs_dir, name)
            try:
                await loop.run_in_executor(None, _rmtree, path)
            except OSError as err:
                log.error("Failed to remove pod logs directory %s: %s", path, err)
                continue
            result.log_dirs.append(path)


def _grace(c: pb.Container) -> int:
    try:
        return max(MIN_GRACE_S, int(c.annotations.get(POD_TERMINATION_GRACE, "")))
    except ValueError:
        return MIN_GRACE_S


def _remove_glob(path: str) -> None:
    for p in glob.glob(glob.escape(path) + "*"):
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def _rmtree(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
