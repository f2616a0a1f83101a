"""The node's eviction signals, observed as the Go kubelet's makeSignalObservations
sees them through pkg/kubelet/stats (helpers.go, stats/provider.go, pidlimit):

- memory.available: the machine's memory (MemTotal) less the root cgroup's
  working set (v1: memory.usage_in_bytes less total_inactive_file; v2: the
  root's memory.stat anon + file less inactive_file, the root having no
  memory.current), never below zero. Page cache the kernel
  can drop counts as available; MemAvailable's other guesses do not;
- allocatableMemory.available (when enforceNodeAllocatable has `pods`): the
  kubepods cgroup's memory limit, node allocatable, less its working set;
- nodefs.available, nodefs.inodesFree: statvfs of the kubelet's root directory;
- imagefs.*: statvfs of the mountpoint of the runtime's first image
  filesystem (CRI ImageFsInfo);
- containerfs.*: with KubeletSeparateDiskGC, the runtime's first container
  filesystem when it is on another device than the images; otherwise the
  imagefs figures (upstream's ImageFsStats gives the one filesystem twice);
- pid.available: min(kernel.pid_max, kernel.threads-max) less the tasks
  /proc/loadavg counts.

Cgroup and /proc files are read with the project's stats parsers
(kubelet.stats: Cython, or the reference with KUBELET_IMPL=reference).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from kubelet import stats
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.stats import pidlimit
from kubelet.stats.types import working_set

log = logging.getLogger(__name__)

MEMORY = "memory.available"
ALLOCATABLE_MEMORY = "allocatableMemory.available"
NODEFS, NODEFS_INODES = "nodefs.available", "nodefs.inodesFree"
IMAGEFS, IMAGEFS_INODES = "imagefs.available", "imagefs.inodesFree"
CONTAINERFS, CONTAINERFS_INODES = "containerfs.available", "containerfs.inodesFree"
PID = "pid.available"
_MEMORY_FIELDS = frozenset(
    {"memory_working_set", "memory_limit", "memory_rss", "memory_cache", "memory_inactive_file"}
)


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int
    # Memory signals: usage the kernel counts that the working set does not
    # (inactive file), for the memcg notifier's level.
    reclaimable: int = field(default=0, compare=False)


@dataclass(frozen=True)
class DiskLayout:
    """Where nodefs, imagefs and containerfs are. `dedicated_image_fs`: images
    (or containers) live off the root directory's filesystem (HasDedicatedImageFs);
    `split`: containers' writable layers are on another filesystem than the
    images (HasDedicatedContainerFs, only with KubeletSeparateDiskGC)."""

    nodefs: str
    imagefs: str | None  # None: the runtime named no image filesystem
    containerfs: str | None  # None: as imagefs
    dedicated_image_fs: bool
    split: bool


def shared_layout(root_dir: str) -> DiskLayout:
    """One filesystem for everything (what is assumed until the runtime answers)."""
    return DiskLayout(root_dir, root_dir, None, False, False)


def _mountpoint(filesystems: Sequence[pb.FilesystemUsage]) -> str | None:
    for fs in filesystems:
        if fs.fs_id.mountpoint:
            return str(fs.fs_id.mountpoint)
    return None


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError as err:
        log.warning("eviction: cannot stat %s: %s", path, err)
        return None


def disk_layout(
    root_dir: str,
    info: pb.ImageFsInfoResponse,
    separate_disk_gc: bool,
    device: Callable[[str], int | None] = _device,
) -> DiskLayout:
    """The layout from the runtime's ImageFsInfo answer, by device numbers as
    cAdvisor compares them."""
    image = _mountpoint(info.image_filesystems)
    container = _mountpoint(info.container_filesystems)
    root_dev = device(root_dir)
    image_dev = device(image) if image else None
    container_dev = device(container) if container else None
    split = container_dev is not None and image_dev is not None and container_dev != image_dev
    if split and not separate_disk_gc:
        # Upstream refuses to run eviction in this state; here the node stays
        # watched with containerfs read as imagefs, and the operator is told.
        log.error(
            "KubeletSeparateDiskGC is turned off but the runtime has a split filesystem "
            "(images on %s, containers on %s): containerfs signals read the image filesystem",
            image,
            container,
        )
        split = False
    dedicated = split or (image_dev is not None and image_dev != root_dev)
    return DiskLayout(root_dir, image, container if split else None, dedicated, split)


# Why a signal is not observed, in words for the log (the caller tells each once).
Problems = list[str]


def _fs(out: dict[str, Observation], path: str, available: str, inodes: str,
        problems: Problems) -> None:  # fmt: skip
    fs = stats.fs_usage(path)
    if fs is None:
        problems.append(f"{available} and {inodes} unobserved: no filesystem stats for {path}")
        return
    out[available] = Observation(fs["available"], fs["capacity"])
    out[inodes] = Observation(fs["inodes_free"], fs["inodes"])


def fs_observations(layout: DiskLayout, problems: Problems) -> dict[str, Observation]:
    out: dict[str, Observation] = {}
    _fs(out, layout.nodefs, NODEFS, NODEFS_INODES, problems)
    if layout.imagefs is None:
        problems.append(f"{IMAGEFS} and {IMAGEFS_INODES} unobserved: no image filesystem known")
        return out
    _fs(out, layout.imagefs, IMAGEFS, IMAGEFS_INODES, problems)
    if layout.containerfs is not None:
        _fs(out, layout.containerfs, CONTAINERFS, CONTAINERFS_INODES, problems)
    elif IMAGEFS in out:
        out[CONTAINERFS], out[CONTAINERFS_INODES] = out[IMAGEFS], out[IMAGEFS_INODES]
    return out


def _available(limit: int, working_set: int, reclaimable: int | None) -> Observation:
    return Observation(max(0, limit - working_set), limit, reclaimable or 0)


def memory_observations(
    version: int, hierarchy: str, kubepods: str | None, meminfo: str, problems: Problems
) -> dict[str, Observation]:
    """memory.available and, with `kubepods` (its cgroup path, when node
    allocatable is enforced on pods), allocatableMemory.available."""
    out: dict[str, Observation] = {}
    rels = [""] if kubepods is None else ["", kubepods]
    parsed = stats.parse_cgroups(rels, version, hierarchy, fields=_MEMORY_FIELDS)
    mi = stats.read_meminfo(meminfo)
    total = mi.get("MemTotal") if mi else None
    root_ws = working_set(parsed[0])
    if total and root_ws is not None:
        out[MEMORY] = _available(total, root_ws, parsed[0].memory_inactive_file)
    else:
        problems.append(f"{MEMORY} unobserved: MemTotal {total}, root working set {root_ws}")
    if kubepods is not None:
        pods = parsed[1]
        pods_ws = working_set(pods)
        if pods.memory_limit is not None and pods_ws is not None:
            out[ALLOCATABLE_MEMORY] = _available(
                pods.memory_limit, pods_ws, pods.memory_inactive_file
            )
        else:
            problems.append(f"{ALLOCATABLE_MEMORY} unobserved: cgroup {kubepods} has no "
                            "memory limit or working set")  # fmt: skip
    return out


def pid_observation(proc: str, problems: Problems) -> Observation | None:
    """Tasks the kernel can still make: the lower of pid_max and threads-max,
    less every task there is (threads included, /proc/loadavg's fourth field)."""
    t = pidlimit.tasks(proc)
    if t is None:
        problems.append(f"{PID} unobserved: no pid_max or threads-max, or no loadavg")
        return None
    return Observation(t.max - t.running, t.max)


ImageFsInfo = Callable[[], Awaitable[pb.ImageFsInfoResponse]]


class NodeSignals:
    """The signals of this node. The disk layout is learnt once from the
    runtime (as upstream, on the first pass it answers); until then imagefs and
    containerfs are not observed."""

    def __init__(
        self,
        root_dir: str,
        cgroup_version: int,
        hierarchy: str,
        kubepods: str | None,
        image_fs_info: ImageFsInfo | None,
        separate_disk_gc: bool = True,
        proc: str = "/proc",
    ) -> None:
        self.root_dir = root_dir
        self.cgroup_version = cgroup_version
        self.hierarchy = hierarchy
        self.kubepods = kubepods
        self.image_fs_info = image_fs_info
        self.separate_disk_gc = separate_disk_gc
        self.proc = proc
        # No runtime to ask: everything is on the root directory's filesystem.
        self._layout = shared_layout(root_dir) if image_fs_info is None else None
        self._told: frozenset[str] = frozenset()

    async def layout(self) -> DiskLayout | None:
        if self._layout is None and self.image_fs_info is not None:
            try:
                info = await self.image_fs_info()
            except errors.CRIError as err:
                log.warning("eviction: the runtime's ImageFsInfo failed, imagefs unobserved: %s",
                            err)  # fmt: skip
                return None
            found = disk_layout(self.root_dir, info, self.separate_disk_gc)
            if found.imagefs is None:
                log.warning("eviction: the runtime names no image filesystem: imagefs unobserved")
            log.info("eviction: filesystems %s", found)
            self._layout = found
        return self._layout

    def observe(self) -> dict[str, Observation]:
        """Every signal now (blocking reads: run it in an executor)."""
        layout = self._layout or DiskLayout(self.root_dir, None, None, False, False)
        problems: Problems = []
        out = memory_observations(
            self.cgroup_version, self.hierarchy, self.kubepods, f"{self.proc}/meminfo", problems
        )
        out.update(fs_observations(layout, problems))
        pid = pid_observation(self.proc, problems)
        if pid is not None:
            out[PID] = pid
        # Each problem once while it lasts (a signal missing every 10 s is one line).
        for p in problems:
            if p not in self._told:
                log.warning("eviction: %s", p)
        self._told = frozenset(problems)
        return out
