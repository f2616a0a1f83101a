"""Node and pod resource usage for /stats/summary and /metrics/resource
(pkg/kubelet/stats, pkg/kubelet/server/stats; the CPU/memory part).

One parse_cgroups call reads every pod cgroup (kubepods/<qos>/pod<uid>) per
collection; node figures come from /proc and statvfs. CPU rates
(usageNanoCores) are the change since the previous collection. Collections are
cached for a second, so scrapers hitting both endpoints cost one pass.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from kubelet import stats
from kubelet.cm.cgroup_manager import PodContainerManager, cgroup_mounts
from kubelet.stats.volumes import VolumeUsage
from kubelet.types import Pod, name, namespace, uid

log = logging.getLogger(__name__)

CLK_TCK = os.sysconf("SC_CLK_TCK")
CACHE_SECONDS = 1.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatsProvider:
    def __init__(
        self,
        pods: Callable[[], list[Pod]],
        root_dir: str,
        node_name: str,
        cgroup_root: str = "",
        mountinfo: str = "/proc/self/mountinfo",
        volume_usage: Callable[[str], list[VolumeUsage]] = lambda _uid: [],
    ) -> None:
        self.pods = pods
        self.volume_usage = volume_usage  # pod UID -> measured volumes (cached)
        self.root_dir = root_dir
        self.node_name = node_name
        self.cgroup_root = cgroup_root.strip("/")
        try:
            self.version, mounts = cgroup_mounts(mountinfo)
        except OSError:
            self.version, mounts = 2, {}
        if self.version == 1:
            # parse_cgroups wants <root>/<controller>/...; the per-controller
            # mounts (or their cpu/cpuacct symlinks) live side by side.
            self.hierarchy = os.path.dirname(mounts.get("memory", "/sys/fs/cgroup/memory"))
        else:
            self.hierarchy = mounts.get("", "/sys/fs/cgroup")
        self._prev: dict[str, tuple[float, int]] = {}  # key -> (time, cpu ns)
        self._cached: tuple[float, dict[str, Any]] | None = None
        self.collections = 0

    def _rate(self, key: str, now: float, cpu_ns: int | None) -> int | None:
        if cpu_ns is None:
            return None
        prev = self._prev.get(key)
        self._prev[key] = (now, cpu_ns)
        if prev is None or now <= prev[0] or cpu_ns < prev[1]:
            return None
        return int((cpu_ns - prev[1]) / (now - prev[0]))

    def summary(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < CACHE_SECONDS:
            return self._cached[1]
        out = self._collect(now)
        self._cached = (now, out)
        return out

    def _collect(self, now: float) -> dict[str, Any]:
        self.collections += 1
        ts = _now()
        pods = self.pods()
        rels = []
        for p in pods:
            rel = PodContainerManager.name(p)
            rels.append(f"{self.cgroup_root}/{rel}" if self.cgroup_root else rel)
        per_pod = stats.parse_cgroups(rels, self.version, self.hierarchy) if rels else []
        pod_out = []
        seen = set()
        for p, st in zip(pods, per_pod, strict=True):
            if st.cpu_usage_ns is None and st.memory_usage is None:
                continue  # no cgroup of ours (cgroupsPerQOS off, or not made yet)
            key = uid(p)
            seen.add(key)
            pod_out.append(
                {
                    "podRef": {"name": name(p), "namespace": namespace(p), "uid": key},
                    "startTime": (p.get("status") or {}).get("startTime"),
                    "cpu": {
                        "time": ts,
                        "usageNanoCores": self._rate(key, now, st.cpu_usage_ns),
                        "usageCoreNanoSeconds": st.cpu_usage_ns,
                    },
                    "memory": {
                        "time": ts,
                        "usageBytes": st.memory_usage,
                        "workingSetBytes": st.memory_working_set,
                        "rssBytes": st.memory_rss,
                        "pageFaults": st.pgfault,
                        "majorPageFaults": st.pgmajfault,
                    },
                    "process_stats": {"process_count": st.pids_current},
                }
            )
            volumes = self.volume_usage(key)
            if volumes:
                pod_out[-1]["volume"] = [v.to_api(ts) for v in volumes]
        for key in list(self._prev):
            if key not in seen and key != "node":
                del self._prev[key]
        return {"node": self._node(now, ts), "pods": pod_out}

    def _node(self, now: float, ts: str) -> dict[str, Any]:
        node: dict[str, Any] = {"nodeName": self.node_name}
        ps = stats.read_proc_stat()
        if ps is not None and ps["cpu"] is not None:
            user, nice, system, _idle, _iow, irq, softirq, steal = ps["cpu"]
            busy_ns = (user + nice + system + irq + softirq + steal) * (10**9 // CLK_TCK)
            node["cpu"] = {
                "time": ts,
                "usageNanoCores": self._rate("node", now, busy_ns),
                "usageCoreNanoSeconds": busy_ns,
            }
        mi = stats.read_meminfo()
        if mi is not None and mi["MemTotal"] is not None:
            avail = mi["MemAvailable"] or 0
            node["memory"] = {
                "time": ts,
                "availableBytes": avail,
                "usageBytes": mi["MemTotal"] - (mi["MemFree"] or 0),
                "workingSetBytes": mi["MemTotal"] - avail,
            }
        fs = stats.fs_usage(self.root_dir)
        if fs is not None:
            node["fs"] = {
                "time": ts,
                "availableBytes": fs["available"],
                "capacityBytes": fs["capacity"],
                "usedBytes": fs["used"],
                "inodesFree": fs["inodes_free"],
                "inodes": fs["inodes"],
                "inodesUsed": fs["inodes_used"],
            }
        return node


class ResourceMetrics(Collector):
    """/metrics/resource: the node and pod CPU and memory series metrics-server reads."""

    def __init__(self, provider: StatsProvider) -> None:
        self.provider = provider

    def collect(self) -> Any:
        s = self.provider.summary()
        node = s["node"]
        cpu = CounterMetricFamily(
            "node_cpu_usage_seconds", "Cumulative cpu time consumed by the node in core-seconds"
        )
        mem = GaugeMetricFamily(
            "node_memory_working_set_bytes", "Current working set of the node in bytes"
        )
        if node.get("cpu", {}).get("usageCoreNanoSeconds") is not None:
            cpu.add_metric([], node["cpu"]["usageCoreNanoSeconds"] / 1e9)
        if node.get("memory", {}).get("workingSetBytes") is not None:
            mem.add_metric([], node["memory"]["workingSetBytes"])
        pcpu = CounterMetricFamily(
            "pod_cpu_usage_seconds",
            "Cumulative cpu time consumed by the pod in core-seconds",
            labels=["namespace", "pod"],
        )
        pmem = GaugeMetricFamily(
            "pod_memory_working_set_bytes",
            "Current working set of the pod in bytes",
            labels=["namespace", "pod"],
        )
        for p in s["pods"]:
            labels = [p["podRef"]["namespace"], p["podRef"]["name"]]
            if p["cpu"]["usageCoreNanoSeconds"] is not None:
                pcpu.add_metric(labels, p["cpu"]["usageCoreNanoSeconds"] / 1e9)
            if p["memory"]["workingSetBytes"] is not None:
                pmem.add_metric(labels, p["memory"]["workingSetBytes"])
        up = GaugeMetricFamily(
            "scrape_error", "1 if there was an error while getting container metrics, 0 otherwise"
        )
        up.add_metric([], 0)
        yield from (cpu, mem, pcpu, pmem, up)


def resource_registry(provider: StatsProvider) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ResourceMetrics(provider))
    return reg
