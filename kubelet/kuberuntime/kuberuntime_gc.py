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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.labels import POD_NAME, POD_NAMESPACE, POD_TERMINATION_GRACE, POD_UID

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
        container_logs_dir: str = "",
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
        # The legacy log links (/var/log/containers; "": none).
        self.container_logs_dir = container_logs_dir
        self.policy = policy or GCPolicy()
        self.sources_ready = sources_ready
        self.node_event = node_event
        self.clock = clock
        self.period = period
        self._keys: dict[str, tuple[str, str]] = {}
        self._log_dirs: tuple[int, list[tuple[str, str]]] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then every period until `stop` is set; a failed pass is a
        ContainerGCFailed Warning event on the Node, as upstream."""
        while not stop.is_set():
            try:
                await self.garbage_collect()
            except Exception as err:  # told on the Node; the next period runs a full pass
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
        dead: list[pb.Container] = []
        if containers is not None:
            dead = await self._evict_containers(containers, ready, evict_non_deleted_pods, result)
        try:
            sandboxes = await self.runtime.list_pod_sandbox()
        except errors.CRIError as err:
            problems.append(f"failed to list pod sandboxes: {err}")
        else:
            if containers is not None:
                await self._evict_sandboxes(
                    sandboxes, containers, dead, evict_non_deleted_pods, result
                )
        if ready:
            try:
                await self._evict_log_dirs(result)
            except OSError as err:
                problems.append(f"failed to read podLogsRootDirectory {self.pod_logs_dir!r}: {err}")
        try:
            await self._evict_legacy_links()
        except errors.CRIError as err:
            problems.append(f"failed to check dead log links: {err}")
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
    ) -> list[pb.Container]:
        """Returns the dead containers that are still there."""
        running = pb.CONTAINER_RUNNING
        # Comprehensions, not one loop with branches: at 10,000 containers every
        # bytecode per container shows. Most containers of a busy node run.
        dead = [c for c in containers if c.state != running]
        if not dead:
            return dead
        ids = [c.id for c in dead]
        units = self._unit_keys(dead, ids)
        all_dead, all_ids = dead, ids  # young ones too: they still occupy their sandbox
        if self.policy.min_age > 0:
            newest_ns = int((self.clock() - self.policy.min_age) * 1e9)
            old = [i for i, c in enumerate(dead) if c.created_at <= newest_ns]
            dead, ids, units = (
                [dead[i] for i in old],
                [ids[i] for i in old],
                [units[i] for i in old],
            )
        counts = Counter(units)
        work, removable = self._groups_to_trim(counts, len(dead), ready, evict_non_deleted_pods)
        if not work:
            return all_dead
        await self._trim_groups(dead, units, work, removable, result)
        if not result.containers:
            return all_dead
        gone = set(result.containers)
        for cid in gone:
            self._keys.pop(cid, None)
        return [c for c, i in zip(all_dead, all_ids, strict=True) if i not in gone]

    def _groups_to_trim(
        self,
        counts: Counter[tuple[str, str]],
        n_dead: int,
        ready: bool,
        evict_non_deleted_pods: bool,
    ) -> tuple[set[tuple[str, str]], set[str]]:
        """The (pod, container) groups with something to remove, and the pods
        whose dead containers all go. The steady state (one dead instance per
        container, every pod there) answers two empty sets."""
        work: set[tuple[str, str]] = set()
        removable: set[str] = set()
        if ready:
            uids = {k[0] for k in counts}
            exists = self.pod_exists
            removable = {u for u in uids if not exists(u)}
            if evict_non_deleted_pods and self.pod_terminated is not None:
                terminated = self.pod_terminated
                removable.update(u for u in uids if terminated(u))
            if removable:
                work.update(k for k in counts if k[0] in removable)
        keep = self.policy.max_per_pod_container
        if keep >= 0:
            work.update(k for k, n in counts.items() if n > keep)
        limit = self.policy.max_containers
        if limit >= 0 and n_dead > limit:
            work = set(counts)  # the node-wide limit looks at every group
        return work, removable

    async def _trim_groups(
        self,
        dead: list[pb.Container],
        units: list[tuple[str, str]],
        work: set[tuple[str, str]],
        removable: set[str],
        result: GCResult,
    ) -> None:
        """Remove all of the removable pods' groups, then the oldest of each
        group over the per-container limit, then the oldest over the node's."""
        groups: dict[tuple[str, str], list[pb.Container]] = {}  # in the runtime's order
        for c, k in zip(dead, units, strict=True):
            if k in work:
                groups.setdefault(k, []).append(c)
        for g in groups.values():
            g.sort(key=_created, reverse=True)  # newest first
        for key in [k for k in groups if k[0] in removable]:
            group = groups.pop(key)
            await self._remove_oldest(group, len(group), result)
        keep, limit = self.policy.max_per_pod_container, self.policy.max_containers
        if keep >= 0:
            await self._enforce_per_unit(groups, keep, result)
        if limit >= 0 and groups and sum(len(g) for g in groups.values()) > limit:
            await self._enforce_per_unit(groups, max(1, limit // len(groups)), result)
            total = sum(len(g) for g in groups.values())
            if total > limit:
                flat = [c for g in groups.values() for c in g]
                flat.sort(key=_created, reverse=True)
                await self._remove_oldest(flat, total - limit, result)

    def _unit_keys(self, dead: list[pb.Container], ids: list[str]) -> list[tuple[str, str]]:
        """(pod UID, container name) of each container. Labels are a slow protobuf
        map and never change: read once per container, then kept by ID."""
        seen = self._keys
        try:
            keys = [seen[i] for i in ids]  # the steady state: one comprehension
        except KeyError:  # containers not seen before: their labels read once
            for c in dead:
                if c.id not in seen:
                    seen[c.id] = (c.labels.get(POD_UID, ""), c.metadata.name)
            keys = [seen[i] for i in ids]
        if len(seen) > 2 * len(ids) + 1024:
            # Containers removed by others (the pod workers) leave entries behind.
            self._keys = dict(zip(ids, keys, strict=True))
        return keys

    async def _enforce_per_unit(
        self, units: dict[tuple[str, str], list[pb.Container]], keep: int, result: GCResult
    ) -> None:
        for key, group in units.items():
            if len(group) > keep:
                units[key] = await self._remove_oldest(group, len(group) - keep, result)

    async def _remove_oldest(
        self, group: list[pb.Container], n: int, result: GCResult
    ) -> list[pb.Container]:
        """Remove the last `n` of a newest-first list, oldest first. Returns what is
        kept; like upstream, a failed removal still counts as gone for this pass so
        one stuck container does not make the pass remove newer ones instead."""
        keep = max(0, len(group) - n)
        for c in reversed(group[keep:]):
            if await self._remove_container(c):
                result.containers.append(c.id)
        return group[:keep]

    async def _remove_container(self, c: pb.Container) -> bool:
        try:
            if c.state == pb.CONTAINER_UNKNOWN:
                # It may still run: stop it before removal, as upstream kills it.
                await self.runtime.stop_container(c.id, _grace(c))
            await self._remove_container_logs(c)
            await self.runtime.remove_container(c.id)
        except errors.NotFoundError:
            return True
        except (errors.CRIError, OSError) as err:
            log.error("Failed to remove container %s: %s", c.id, err)
            return False
        return True

    async def _remove_container_logs(self, c: pb.Container) -> None:
        # The log path is only in the container's status; a removal is rare, a
        # status call per removal is fine (never one per container per pass).
        path = (await self.runtime.container_status(c.id)).status.log_path
        loop = asyncio.get_running_loop()
        if os.path.isabs(path):
            await loop.run_in_executor(None, _remove_glob, path)
        if self.container_logs_dir:
            link = legacy.log_symlink(
                self.container_logs_dir,
                c.labels.get(POD_NAME, ""),
                c.labels.get(POD_NAMESPACE, ""),
                c.metadata.name,
                c.id,
            )
            await loop.run_in_executor(None, legacy.remove, link)

    async def _evict_legacy_links(self) -> None:
        """Links whose log is gone, unless their container still runs (its log
        is only missing while being rotated), as upstream."""
        if not self.container_logs_dir:
            return
        loop = asyncio.get_running_loop()
        for link, cid in await loop.run_in_executor(None, legacy.dangling, self.container_logs_dir):
            if cid is not None:
                try:
                    st = await self.runtime.container_status(cid)
                except errors.NotFoundError:
                    pass
                else:
                    if st.status.state != pb.CONTAINER_EXITED:
                        continue
            await loop.run_in_executor(None, legacy.remove, link)

    # ------------------------------------------------------------- sandboxes
    async def _evict_sandboxes(
        self,
        sandboxes: list[pb.PodSandbox],
        containers: list[pb.Container],
        dead: list[pb.Container],
        evict_non_deleted_pods: bool,
        result: GCResult,
    ) -> None:
        ready = pb.SANDBOX_READY
        idle = [s for s in sandboxes if s.state != ready]
        if not idle:
            return  # the usual case: one read per sandbox
        occupied = {c.pod_sandbox_id for c in dead}
        idle = [s for s in idle if s.id not in occupied]
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
        doomed = [
            s
            for s in idle
            if self._removable(s.metadata.uid, evict_non_deleted_pods)
            or newest[s.metadata.uid][1] != s.id  # a live pod keeps its newest sandbox
        ]
        if not doomed:
            return
        # Only now, with something to remove, look at the running containers too.
        running = pb.CONTAINER_RUNNING
        occupied.update(c.pod_sandbox_id for c in containers if c.state == running)
        doomed.sort(key=_created)  # oldest first
        for s in doomed:
            if s.id not in occupied and await self._remove_sandbox(s.id):
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
        listed = await loop.run_in_executor(None, self._list_log_dirs)
        if listed is None:
            return
        gone = [name for name, u in listed if not self.pod_exists(u)]
        for name in gone:
            path = os.path.join(self.pod_logs_dir, name)
            try:
                await loop.run_in_executor(None, _rmtree, path)
            except OSError as err:
                log.error("Failed to remove pod logs directory %s: %s", path, err)
                continue
            result.log_dirs.append(path)

    def _list_log_dirs(self) -> list[tuple[str, str]] | None:
        """(entry, pod UID) of the pod logs dir; the listing is reused while the
        directory's mtime says no entry came or went (5,000 entries each minute)."""
        try:
            mtime = os.stat(self.pod_logs_dir).st_mtime_ns
        except FileNotFoundError:
            return None
        cached = self._log_dirs
        if cached is not None and cached[0] == mtime:
            return cached[1]
        # <namespace>_<name>_<uid>: names and namespaces cannot hold "_", UIDs neither.
        listed = [(n, n.rsplit("_", 1)[-1]) for n in os.listdir(self.pod_logs_dir)]
        # A change within the filesystem's timestamp granularity of the listing
        # could leave mtime as it was: only an mtime that is old enough is trusted.
        if time.time_ns() - mtime > 2_000_000_000:
            self._log_dirs = (mtime, listed)
        return listed


def _created(o: pb.Container | pb.PodSandbox) -> int:
    return o.created_at


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
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
