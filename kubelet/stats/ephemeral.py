"""A pod's local ephemeral storage, as upstream's CRI stats provider sums it for
the summary (pkg/kubelet/stats: calcEphemeralStorage, host_stats_provider.go):

- each running container: its writable layer (the runtime's ContainerStats)
  plus its log files under podLogsDir/<ns>_<name>_<uid>/<container>/;
- the pod's local ephemeral volumes (IsLocalEphemeralVolume: emptyDir on disk,
  configMap, gitRepo) from the volume stats' last pass;
- files directly in the pod's log directory and its etc-hosts file.

Inodes are summed the same way (the writable layers' inodes_used, one per log
file and directory, the volumes' inodes from the volume stats' pass): what
the inode eviction signals rank pods by.

Measured only for the pods asked about (those with a limit to enforce), one
runtime call per pod and a few lstat calls off the event loop: never a walk of
every pod. Nothing here follows a link: log files are lstat'ed, not opened.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubelet.container.hosts import ETC_HOSTS_FILE
from kubelet.container.runtime import PodStatus
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import CRIError
from kubelet.cri.types import RuntimeService
from kubelet.types import Pod, name, namespace, uid

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inodes:
    """What a pod uses of the node's inodes, parted as PodStorage's bytes."""

    volumes: Mapping[str, int]
    containers: Mapping[str, int]
    total: int


NO_INODES = Inodes({}, {}, 0)


@dataclass(frozen=True)
class PodStorage:
    """What a pod uses of the node's local storage, in bytes."""

    volumes: Mapping[str, int]  # every measured volume of the pod, by volume name
    containers: Mapping[str, int]  # running container name -> writable layer + logs
    total: int  # the pod's ephemeral storage (what its total limit is held to)
    inodes: Inodes = NO_INODES  # NO_INODES: not measured


def is_local_ephemeral_volume(volume: Mapping[str, object]) -> bool:
    """IsLocalEphemeralVolume: the volumes whose bytes count as the pod's own."""
    ed = volume.get("emptyDir")
    on_disk = isinstance(ed, Mapping) and not ed.get("medium")
    return on_disk or "configMap" in volume or "gitRepo" in volume


def pod_log_dir(logs_root: str, pod: Pod) -> str:
    return os.path.join(logs_root, f"{namespace(pod)}_{name(pod)}_{uid(pod)}")


def file_usage(path: str) -> int:
    """Bytes a regular file occupies on disk (its blocks, as du counts); 0 for
    anything else or nothing."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0


def dir_files_usage(path: str) -> tuple[int, int]:
    """(bytes, inodes) of the regular files directly in a directory
    (fileMetricsByDir), the directory itself counted as an inode."""
    try:
        with os.scandir(path) as it:
            sizes = [
                e.stat(follow_symlinks=False).st_blocks * 512
                for e in it
                if e.is_file(follow_symlinks=False)
            ]
    except OSError:
        return 0, 0
    return sum(sizes), len(sizes) + 1


@dataclass(frozen=True)
class _HostUsage:
    logs: dict[str, tuple[int, int]]  # container -> (bytes, inodes) of its log files
    own: tuple[int, int]  # the pod's own log files and etc-hosts


def _host_usage(logs: str, containers: list[str], etc_hosts: str) -> _HostUsage:
    """What the pod's logs and etc-hosts hold: blocking."""
    per = {c: dir_files_usage(os.path.join(logs, c)) for c in containers}
    own_bytes, own_inodes = dir_files_usage(logs)
    hosts = (file_usage(etc_hosts), 1 if os.path.lexists(etc_hosts) else 0)
    return _HostUsage(per, (own_bytes + hosts[0], own_inodes + hosts[1]))


class EphemeralStorageStats:
    def __init__(
        self,
        runtime: RuntimeService,
        pod_logs_dir: str,
        pods_dir: str,
        pod_status: Callable[[str], PodStatus],
        volume_usage: Callable[[str], Mapping[str, int]],
        concurrency: int = 8,
        volume_inodes: Callable[[str], Mapping[str, int]] = lambda _uid: {},
    ) -> None:
        self.runtime = runtime
        self.pod_logs_dir = pod_logs_dir
        self.pods_dir = pods_dir
        self.pod_status = pod_status  # the pod cache's view: which containers run
        self.volume_usage = volume_usage  # pod UID -> volume name -> bytes (cached pass)
        self.volume_inodes = volume_inodes  # the same, inodes
        self._sem = asyncio.Semaphore(concurrency)

    async def measure(self, pods: list[Pod]) -> dict[str, PodStorage]:
        """Usage of each of these pods; a pod the runtime cannot answer for is left out."""
        results = await asyncio.gather(*(self._measure(p) for p in pods))
        return {uid(p): r for p, r in zip(pods, results, strict=True) if r is not None}

    async def _writable_layers(self, status: PodStatus) -> dict[str, tuple[int, int]] | None:
        """(bytes, inodes) of each running container's writable layer, by name."""
        running = {c.id: c.name for c in status.running()}
        sandbox = next((sb.id for sb in status.sandboxes if sb.ready), None)
        if not running or sandbox is None:
            return {}
        async with self._sem:
            try:
                stats = await self.runtime.list_container_stats(
                    pb.ContainerStatsFilter(pod_sandbox_id=sandbox)
                )
            except CRIError as err:  # unknown this pass; measured again on the next
                log.warning("Local storage of pod %s not measured: %s", status.id, err)
                return None
        out: dict[str, tuple[int, int]] = {}
        for s in stats:
            cname = running.get(s.attributes.id)
            if cname is not None:
                layer = s.writable_layer
                out[cname] = (layer.used_bytes.value, layer.inodes_used.value)
        return out

    async def _measure(self, pod: Pod) -> PodStorage | None:
        u = uid(pod)
        rootfs = await self._writable_layers(self.pod_status(u))
        if rootfs is None:
            return None
        host = await asyncio.get_running_loop().run_in_executor(
            None,
            _host_usage,
            pod_log_dir(self.pod_logs_dir, pod),
            list(rootfs),
            os.path.join(self.pods_dir, u, ETC_HOSTS_FILE),
        )
        local = [
            v.get("name", "")
            for v in (pod.get("spec") or {}).get("volumes") or []
            if is_local_ephemeral_volume(v)
        ]

        def part(i: int, volumes: Mapping[str, int]) -> tuple[dict[str, int], int]:
            """(per container, pod total) of bytes (i=0) or inodes (i=1)."""
            per = {c: rootfs[c][i] + host.logs.get(c, (0, 0))[i] for c in rootfs}
            return per, sum(per.values()) + sum(volumes.get(n, 0) for n in local) + host.own[i]

        volumes, vol_inodes = dict(self.volume_usage(u)), dict(self.volume_inodes(u))
        containers, total = part(0, volumes)
        inode_containers, inode_total = part(1, vol_inodes)
        return PodStorage(
            volumes, containers, total, Inodes(vol_inodes, inode_containers, inode_total)
        )
