"""kubelet_container_log_filesystem_used_bytes (upstream's log metrics collector
over the stats provider's per-container log stats): the bytes of each
container's log files, counted as the summary API counts them (the regular
files in podLogsDir/<namespace>_<name>_<uid>/<container>/, their blocks).

Measured for the pod manager's pods once per period (volumeStatsAggPeriod, the
period of the other usage figures measured from the disk) in a worker thread:
a pod dir read and one per container, no walk below. A scrape reads the last
pass and no disk; upstream measures at each scrape."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubelet.stats.ephemeral import dir_files_usage
from kubelet.stats.volumes import measure_every
from kubelet.types import Pod, name, namespace, uid


@dataclass(frozen=True)
class ContainerLogUsage:
    uid: str
    namespace: str
    pod: str
    container: str
    used_bytes: int


def measure_logs(logs_root: str, pods: list[tuple[str, str, str]]) -> list[ContainerLogUsage]:
    """Log usage of every container dir of these (namespace, name, uid) pods:
    blocking. Links are never followed (a dir entry that is a link is skipped)."""
    out: list[ContainerLogUsage] = []
    for ns, pod_name, pod_uid in pods:
        pod_dir = os.path.join(logs_root, f"{ns}_{pod_name}_{pod_uid}")
        try:
            with os.scandir(pod_dir) as it:
                containers = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except OSError:  # no logs (yet), or the pod's dir was just removed
            continue
        for c in containers:
            used, _inodes = dir_files_usage(os.path.join(pod_dir, c))
            out.append(ContainerLogUsage(pod_uid, ns, pod_name, c, used))
    return out


class ContainerLogStats(Collector):
    """The last pass's figures, on /metrics."""

    def __init__(self, pods: Callable[[], list[Pod]], logs_root: str, period: float) -> None:
        self.pods = pods
        self.logs_root = logs_root
        self.period = period
        # pod UID -> its containers' figures from the last pass
        self._usage: dict[str, list[ContainerLogUsage]] = {}

    def forget(self, pod_uid: str) -> None:
        """A pod removed from the node is not shown until the next pass."""
        self._usage.pop(pod_uid, None)

    async def refresh(self) -> None:
        # Which pods is read on the loop; only the disk is read in a thread.
        which = [(namespace(p), name(p), uid(p)) for p in self.pods()]
        loop = asyncio.get_running_loop()
        measured = await loop.run_in_executor(None, measure_logs, self.logs_root, which)
        usage: dict[str, list[ContainerLogUsage]] = {}
        for u in measured:
            usage.setdefault(u.uid, []).append(u)
        self._usage = usage

    async def run(self, stop: asyncio.Event) -> None:
        await measure_every(self.period, self.refresh, stop, "container log usage")

    def collect(self) -> Iterator[Metric]:
        usage = self._usage
        if not usage:
            return  # as upstream: no container, no family
        g = GaugeMetricFamily(
            "kubelet_container_log_filesystem_used_bytes",
            "Bytes of the container's log files on the filesystem, from the last measuring pass.",
            labels=["uid", "namespace", "pod", "container"],
        )
        for u in (c for containers in usage.values() for c in containers):
            g.add_metric([u.uid, u.namespace, u.pod, u.container], float(u.used_bytes))
        yield g

    def describe(self) -> Iterator[Metric]:
        return iter(())
