"""Per-pod volume usage for /stats/summary (volume_stat_calculator.go upstream).

Each volume that lives in the pod's directory (emptyDir, configMap, secret,
downwardAPI, projected) is measured like `du -x` plus statvfs of the filesystem
holding it, once per period in a worker thread, and served from a cache: a
/stats/summary never walks a directory. hostPath and PVC volumes are the
node's or the cluster's, not the pod's, and are left out, as upstream reports
no usage for hostPath.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubelet.util import filesystem
from kubelet.volume.metrics import DU_DURATION, VolumeUsage

log = logging.getLogger(__name__)

VOLUME_STATS_PERIOD = 60.0  # volumeStatsAggPeriod's default


def du(path: str) -> tuple[int, int]:
    """(bytes in use, inodes) under path, never following symlinks or crossing
    into another filesystem; files that vanish meanwhile are skipped. The
    walk holds each directory open (filesystem.walk), so a directory a
    container swaps for a link while it is measured is not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        try:  # a link or a special file at the top counts for itself
            top = os.lstat(path)
        except OSError:
            return 0, 0
        return top.st_blocks * 512, 1
    try:
        top = os.fstat(fd)
        used, inodes = top.st_blocks * 512, 1
        if not stat.S_ISDIR(top.st_mode):
            return used, inodes
        for _, _, st in filesystem.walk(fd, lambda st: st.st_dev == top.st_dev):
            if st.st_dev != top.st_dev:
                continue  # a mount below the volume is not its usage
            used += st.st_blocks * 512
            inodes += 1
        return used, inodes
    except OSError:
        return used, inodes
    finally:
        os.close(fd)


def measure(name: str, path: str) -> VolumeUsage | None:
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    with DU_DURATION.time():
        used, inodes = du(path)
    return VolumeUsage(
        name=name,
        used_bytes=used,
        inodes_used=inodes,
        capacity_bytes=fs.f_blocks * fs.f_frsize,
        available_bytes=fs.f_bavail * fs.f_frsize,
        inodes=fs.f_files,
        inodes_free=fs.f_ffree,
    )


def measure_pods(
    pods_dir: str, paths: Mapping[str, Mapping[str, str]]
) -> dict[str, list[VolumeUsage]]:
    """Usage of the volumes in each pod's own directory (blocking)."""
    base = os.path.normpath(pods_dir)
    out: dict[str, list[VolumeUsage]] = {}
    for u, vols in paths.items():
        measured = [
            m
            for vname, path in sorted(vols.items())
            if os.path.normpath(path).startswith(f"{base}/{u}/")
            and (m := measure(vname, path)) is not None
        ]
        if measured:
            out[u] = measured
    return out


# For a volume whose driver reports its own usage (CSI NodeGetVolumeStats):
# (volume name, host path) -> the query to run, or None for volumes measured here.
RemoteQuery = Callable[[], Awaitable[VolumeUsage | None]]
RemoteStats = Callable[[str, str], RemoteQuery | None]
REMOTE_CONCURRENCY = 8


class VolumeStatsCalculator:
    """Volume usage of every pod, refreshed every period off the event loop."""

    def __init__(
        self,
        pod_uids: Callable[[], list[str]],
        volume_paths: Callable[[str], Mapping[str, str]],
        pods_dir: str,
        period: float = VOLUME_STATS_PERIOD,
        remote: RemoteStats | None = None,
        claims: Callable[[str], Mapping[str, tuple[str, str]]] = lambda uid: {},
    ) -> None:
        self.pod_uids = pod_uids
        self.volume_paths = volume_paths  # pod UID -> volume name -> host path
        self.pods_dir = pods_dir
        self.period = period
        self.remote = remote
        self.claims = claims  # pod UID -> volume name -> (namespace, claim)
        self._usage: dict[str, list[VolumeUsage]] = {}

    def usage(self, pod_uid: str) -> list[VolumeUsage]:
        return self._usage.get(pod_uid, [])

    def forget(self, pod_uid: str) -> None:
        """A pod removed from the node is not shown until the next pass."""
        self._usage.pop(pod_uid, None)

    def claims_usage(self) -> dict[tuple[str, str], VolumeUsage]:
        """(namespace, claim) -> the claim's volume usage, once per claim
        (pods sharing a claim measure the same volume)."""
        out: dict[tuple[str, str], VolumeUsage] = {}
        for measured in self._usage.values():
            for v in measured:
                if v.pvc_ref is not None:
                    out.setdefault(v.pvc_ref, v)
        return out

    async def refresh(self) -> None:
        # What to measure is read on the loop; only the walking happens in a thread.
        paths = {u: dict(self.volume_paths(u)) for u in self.pod_uids()}
        queries: list[tuple[str, RemoteQuery]] = []
        if self.remote is not None:
            for u, vols in paths.items():
                for vname, path in list(vols.items()):
                    q = self.remote(vname, path)
                    if q is not None:
                        queries.append((u, q))
                        del vols[vname]
        loop = asyncio.get_running_loop()
        usage = await loop.run_in_executor(None, measure_pods, self.pods_dir, paths)
        for u, got in await _bounded(queries):
            usage.setdefault(u, []).append(got)
        for u, measured in usage.items():
            refs = self.claims(u)
            measured[:] = sorted(
                (replace(v, pvc_ref=refs[v.name]) if v.name in refs else v for v in measured),
                key=lambda v: v.name,
            )
        self._usage = usage

    async def run(self, stop: asyncio.Event) -> None:
        await measure_every(self.period, self.refresh, stop, "volume usage")


async def measure_every(
    period: float, refresh: Callable[[], Awaitable[None]], stop: asyncio.Event, what: str
) -> None:
    """refresh() now and every volumeStatsAggPeriod until stop. A negative period
    turns the measuring off, as upstream (0 is defaulted to 1m before here)."""
    if period <= 0:
        log.info("volumeStatsAggPeriod is %ss: %s is not measured", period, what)
        return
    while not stop.is_set():
        try:
            await refresh()
        except Exception:  # the last figures stay; the next period measures again
            log.exception("measuring %s failed", what)
        try:
            await asyncio.wait_for(stop.wait(), period)
        except TimeoutError:
            pass


async def _bounded(queries: list[tuple[str, RemoteQuery]]) -> list[tuple[str, VolumeUsage]]:
    """Run the remote queries a few at a time; failures are logged and left out
    (a volume torn down meanwhile is simply gone)."""
    slots = asyncio.Semaphore(REMOTE_CONCURRENCY)

    async def one(q: RemoteQuery) -> VolumeUsage | None:
        async with slots:
            try:
                return await q()
            except FileNotFoundError:
                return None
            except Exception as err:  # one driver's trouble must not drop the others' figures
                log.warning("volume stats from the driver failed: %s", err)
                return None

    results = await asyncio.gather(*(one(q) for _, q in queries))
    return [(u, r) for (u, _), r in zip(queries, results, strict=True) if r is not None]


# kubelet_volume_stats_* (upstream's volume stats collector): name, help, figure.
_VOLUME_GAUGES: tuple[tuple[str, str, Callable[[VolumeUsage], int]], ...] = (
    ("capacity_bytes", "Capacity in bytes of the volume", lambda v: v.capacity_bytes),
    ("available_bytes", "Number of available bytes in the volume", lambda v: v.available_bytes),
    ("used_bytes", "Number of used bytes in the volume", lambda v: v.used_bytes),
    ("inodes", "Maximum number of inodes in the volume", lambda v: v.inodes),
    ("inodes_free", "Number of free inodes in the volume", lambda v: v.inodes_free),
    ("inodes_used", "Number of used inodes in the volume", lambda v: v.inodes_used),
)
_HEALTH_HELP = (
    "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is "
    "unhealthy, 0 indicates volume is healthy"
)


class VolumeStatsCollector(Collector):
    """The claims' volume figures of the last measuring pass on /metrics, by
    upstream's names and labels (namespace, persistentvolumeclaim); the health
    gauge only for volumes whose driver reported a condition."""

    def __init__(self, claims: Callable[[], Mapping[tuple[str, str], VolumeUsage]]) -> None:
        self.claims = claims

    def collect(self) -> Iterator[Metric]:
        usage = sorted(self.claims().items())
        if not usage:
            return  # as upstream: no claim, no family
        labels = ["namespace", "persistentvolumeclaim"]
        for suffix, text, figure in _VOLUME_GAUGES:
            g = GaugeMetricFamily(f"kubelet_volume_stats_{suffix}", text, labels=labels)
            for ref, v in usage:
                g.add_metric(list(ref), float(figure(v)))
            yield g
        health = GaugeMetricFamily(
            "kubelet_volume_stats_health_status_abnormal", _HEALTH_HELP, labels=labels
        )
        for ref, v in usage:
            if v.abnormal is not None:
                health.add_metric(list(ref), 1.0 if v.abnormal else 0.0)
        if health.samples:
            yield health

    def describe(self) -> Iterator[Metric]:
        return iter(())
