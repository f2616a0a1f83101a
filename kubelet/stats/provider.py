"""Node and pod resource usage for /stats/summary and /metrics/resource
(pkg/kubelet/stats, pkg/kubelet/server/stats; the CPU/memory part).

One parse_cgroups call per collection reads the root cgroup, every pod cgroup
(kubepods/<qos>/pod<uid>) and, with the cgroupfs driver, the cgroups the
runtime made inside it for the pod's running containers and sandbox
(<pod cgroup>/<container id>, taken from the PLEG's pod cache: no directory
listing, no runtime call). Node figures come from /proc and statvfs. CPU rates
(usageNanoCores) are the change since the previous collection. Collections are
cached for a second, so /stats/summary, /metrics/resource and /metrics/cadvisor
scraped together cost one pass.

Each consumer asks for the fields it needs (kubelet.stats.types: EVICTION,
RESOURCE_METRICS, SUMMARY, CADVISOR; with KubeletPSI the summary adds
PSI_FIELDS) and only their files are read. Pressure and swap take the shape of
kubelet.stats.summary; the node's pressure is /proc/pressure/*. The
SUMMARY files (which cover eviction and /metrics/resource) are read through a
CgroupReader that keeps them open, one pread per file, for as many cgroups as
the descriptor budget allows (those of /metrics/resource, the most frequent
reader); /metrics/cadvisor's wider set opens its files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kubelet import stats
from kubelet.cm.cgroup_manager import PodContainerManager, cgroup_mounts, pod_resources
from kubelet.container.runtime import PodStatus, SandboxStatus
from kubelet.cri.api import api_pb2 as pb
from kubelet.stats import pidlimit
from kubelet.stats.netdev import Interface, first_pid, read_net_dev
from kubelet.stats.summary import add_pressure, cgroup_pressure, cgroup_swap, node_swap
from kubelet.stats.types import (
    EVICTION,
    PIDS,
    PSI_FIELDS,
    RESOURCE_METRICS,
    SUMMARY,
    CgroupStats,
    working_set,
)
from kubelet.types import Container, Pod, host_network, name, namespace, uid
from kubelet.util.gotime import meta_now, meta_time_ns
from kubelet.volume.metrics import VolumeUsage

log = logging.getLogger(__name__)

CLK_TCK = os.sysconf("SC_CLK_TCK")
CACHE_SECONDS = 1.0


def _boot_time() -> float:
    try:
        with open("/proc/uptime") as fh:
            return time.time() - float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True, slots=True)
class CgroupRow:
    """One cgroup of a collection with what /metrics/cadvisor labels it by."""

    id: str  # the cgroup path from the hierarchy root, as cAdvisor names containers
    namespace: str
    pod: str
    container: str  # "" for the root, the pod's own cgroup and its sandbox
    name: str  # the runtime's container id ("" for the root and pod cgroups)
    image: str
    start_time: float  # unix seconds
    stats: CgroupStats
    cpu_shares: int | None
    cpu_quota: int | None  # None: no CFS quota
    cpu_period: int | None
    memory_limit: int | None  # None: unlimited
    network: tuple[Interface, ...] = ()


ContainerResources = Callable[[Pod, Container], pb.LinuxContainerResources]


class StatsProvider:
    def __init__(
        self,
        pods: Callable[[], list[Pod]],
        root_dir: str,
        node_name: str,
        cgroup_root: str = "",
        mountinfo: str = "/proc/self/mountinfo",
        volume_usage: Callable[[str], list[VolumeUsage]] = lambda _uid: [],
        pod_status: Callable[[str], PodStatus] | None = None,
        container_resources: ContainerResources | None = None,
        psi: bool = True,
        proc_pressure: str = "/proc/pressure",
    ) -> None:
        self.pods = pods
        # KubeletPSI: pressure in the summary (and /metrics/cadvisor).
        self.psi = psi
        self.proc_pressure = proc_pressure
        self.summary_fields = SUMMARY | PSI_FIELDS if psi else SUMMARY
        # The runtime's view of each pod (container ids, images, start times) from
        # the PLEG's cache, and the resources the kubelet asked the runtime for.
        self.pod_status = pod_status
        self.container_resources = container_resources
        self.boot_time = _boot_time()
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
        # (monotonic time, fields read (None: all), summary, rows)
        self._cached: (
            tuple[float, frozenset[str] | None, dict[str, Any], list[CgroupRow]] | None
        ) = None
        self.collections = 0
        # Kept open: the files of /metrics/resource (cpu.stat, memory.current,
        # memory.stat), which metrics-server scrapes every 15 s and which hold
        # eviction's two, so the budget covers a third more cgroups than with
        # all four. One thread: through kept descriptors a cgroup costs about a
        # microsecond of system calls, less than waking OpenMP workers.
        self._reader = stats.CgroupReader(
            self.version, self.hierarchy, fields=self.summary_fields,
            max_fds=stats.descriptor_budget(),
            threads=1, keep=RESOURCE_METRICS,
        )  # fmt: skip
        # Collections run in executor threads (HTTP handlers, eviction): the
        # reader's descriptors are used by one at a time.
        self._lock = threading.Lock()
        self._rels: dict[str, str] = {}  # pod UID -> its cgroup (QoS never changes)

    def _pod_cgroup(self, p: Pod) -> str:
        u = uid(p)
        rel = self._rels.get(u)
        if rel is None:
            rel = PodContainerManager.name(p)
            rel = self._rels[u] = f"{self.cgroup_root}/{rel}" if self.cgroup_root else rel
        return rel

    @property
    def kept_cgroups(self) -> int:
        """cgroups whose files are kept open between reads."""
        return len(self._reader.kept)

    def invalidate(self) -> None:
        """Forget the cached collection (the next ask reads the cgroups again)."""
        self._cached = None

    def _parse(self, rels: list[str], fields: frozenset[str] | None) -> list[CgroupStats]:
        if fields is not None and fields <= self.summary_fields:
            return list(self._reader.read(rels, fields))
        return stats.parse_cgroups(rels, self.version, self.hierarchy, fields=fields)

    def pod_working_sets(self) -> dict[str, int]:
        """Working set per pod UID (eviction ranking): from a collection of the
        last second if there is one, else one pass over the pod cgroups that
        reads memory.current and memory.stat only."""
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            if cached[1] is None or "memory_working_set" in cached[1]:
                return {
                    p["podRef"]["uid"]: int(p["memory"]["workingSetBytes"])
                    for p in cached[2]["pods"]
                    if p["memory"]["workingSetBytes"] is not None
                }
        pods = self.pods()
        rels = [self._pod_cgroup(p) for p in pods]
        with self._lock:
            parsed = self._parse(rels, EVICTION)
        # Keep the descriptors of live pods and of the cgroups inside them.
        live = set(rels)
        with self._lock:
            self._reader.retain(
                live | {k for k in self._reader.kept if k.rpartition("/")[0] in live}
            )
        self._rels = {u: r for u, r in self._rels.items() if r in live}
        return {
            uid(p): int(st.memory_working_set)
            for p, st in zip(pods, parsed, strict=True)
            if st.memory_working_set is not None
        }

    def container_working_sets(self, p: Pod) -> dict[str, int]:
        """Working set per running container of one pod, by container name
        (what an eviction message blames); empty without the pod's status."""
        status = self.pod_status(uid(p)) if self.pod_status is not None else None
        if status is None:
            return {}
        rel = self._pod_cgroup(p)
        running = status.running()
        with self._lock:
            parsed = self._parse([f"{rel}/{c.id}" for c in running], EVICTION)
        return {
            c.name: int(st.memory_working_set)
            for c, st in zip(running, parsed, strict=True)
            if st.memory_working_set is not None
        }

    def pod_process_counts(self) -> dict[str, int]:
        """Tasks per pod UID (PID pressure ranking): each pod cgroup's pids.current."""
        pods = self.pods()
        rels = [self._pod_cgroup(p) for p in pods]
        with self._lock:
            parsed = self._parse(rels, PIDS)
        return {
            uid(p): int(st.pids_current)
            for p, st in zip(pods, parsed, strict=True)
            if st.pids_current is not None
        }

    def _procs_file(self, rel: str) -> str:
        if self.version == 1:
            return f"{self.hierarchy}/memory/{rel}/cgroup.procs"
        return f"{self.hierarchy}/{rel}/cgroup.procs"

    def _rate(self, key: str, now: float, cpu_ns: int | None) -> int | None:
        if cpu_ns is None:
            return None
        prev = self._prev.get(key)
        self._prev[key] = (now, cpu_ns)
        if prev is None or now <= prev[0] or cpu_ns < prev[1]:
            return None
        return int((cpu_ns - prev[1]) / (now - prev[0]))

    def summary(self) -> dict[str, Any]:
        return self.snapshot(self.summary_fields)[0]

    def snapshot(
        self, fields: frozenset[str] | None = None
    ) -> tuple[dict[str, Any], list[CgroupRow], float]:
        """The last collection (at most a second old) that read at least
        `fields` (None: every field, and the pods' network): the summary, its
        cgroups (root, pods, their sandboxes and containers) and its unix time."""
        now = time.monotonic()
        cached = self._cached
        if (
            cached is None
            or now - cached[0] >= CACHE_SECONDS
            or (cached[1] is not None and (fields is None or not fields <= cached[1]))
        ):
            out, rows = self._collect(now, fields)
            cached = self._cached = (now, fields, out, rows)
        return cached[2], cached[3], time.time() - (now - cached[0])

    def _plan(self) -> tuple[list[str], list[tuple[Pod, str, PodStatus | None, int]]]:
        """One batch of cgroups to read: the root cgroup, then per pod its
        cgroup followed by the cgroups of its ready sandboxes and running
        containers; and per pod (pod, its cgroup, its status, its index)."""
        rels = [""]
        plan: list[tuple[Pod, str, PodStatus | None, int]] = []
        for p in self.pods():
            rel = self._pod_cgroup(p)
            status = self.pod_status(uid(p)) if self.pod_status is not None else None
            plan.append((p, rel, status, len(rels)))
            rels.append(rel)
            if status is not None:
                rels.extend(f"{rel}/{sb.id}" for sb in status.sandboxes if sb.ready)
                rels.extend(f"{rel}/{c.id}" for c in status.running())
        return rels, plan

    def _pod_summary(
        self, p: Pod, st: CgroupStats, containers: list[CgroupRow], now: float, ts: str
    ) -> dict[str, Any]:
        """One pod's entry of the summary (PodStats)."""
        key = uid(p)
        out = {
            "podRef": {"name": name(p), "namespace": namespace(p), "uid": key},
            "startTime": (p.get("status") or {}).get("startTime"),
            **self._cpu_and_memory(key, now, ts, st),
            "process_stats": {"process_count": st.pids_current},
            "containers": [self._container_summary(r, now, ts) for r in containers],
        }
        self._extras(out, ts, st)
        volumes = self.volume_usage(key)
        if volumes:
            out["volume"] = [v.to_api(ts) for v in volumes]
        return out

    def _collect(
        self, now: float, fields: frozenset[str] | None = None
    ) -> tuple[dict[str, Any], list[CgroupRow]]:
        self.collections += 1
        ts = meta_now()
        rels, plan = self._plan()
        with self._lock:
            parsed = self._parse(rels, fields)
            self._reader.retain(rels)
        live = set(rels)
        self._rels = {u: r for u, r in self._rels.items() if r in live}
        rows: list[CgroupRow] = []
        root = parsed[0]
        if root.cpu_usage_ns is not None or root.memory_usage is not None:
            rows.append(
                CgroupRow("/", "", "", "", "", "", self.boot_time, root,
                          None, None, None, root.memory_limit,
                          tuple(read_net_dev("/proc/net/dev") or ()))
            )  # fmt: skip
        pod_out = []
        seen = set()
        for p, rel, status, i in plan:
            st = parsed[i]
            if st.cpu_usage_ns is None and st.memory_working_set is None:
                continue  # no cgroup of ours (cgroupsPerQOS off, or not made yet)
            key = uid(p)
            seen.add(key)
            containers = self._container_rows(
                p, rel, status, parsed, i + 1, rows, network_io=fields is None
            )
            seen.update(r.name for r in containers)
            pod_out.append(self._pod_summary(p, st, containers, now, ts))
        for key in list(self._prev):
            if key not in seen and key != "node":
                del self._prev[key]
        return {"node": self._node(now, ts, root), "pods": pod_out}, rows

    def _container_rows(
        self,
        p: Pod,
        rel: str,
        status: PodStatus | None,
        parsed: list[CgroupStats],
        j: int,
        rows: list[CgroupRow],
        network_io: bool = True,
    ) -> list[CgroupRow]:
        """Appends the pod's row and its sandbox and container rows (those whose
        cgroup exists) to rows; returns the container rows. network_io: read
        the pod's interfaces (only /metrics/cadvisor reports them)."""
        ns, pod_name = namespace(p), name(p)
        # Resources and interfaces: only /metrics/cadvisor (network_io) shows them.
        res = pod_resources(p) if network_io else {}
        start = 0.0
        sandboxes = [sb for sb in status.sandboxes if sb.ready] if status else []
        running = status.running() if status else []
        if sandboxes:
            start = sandboxes[0].created_at / 1e9
        network = self._pod_network(p, rel, sandboxes) if network_io else ()
        pod_stats = parsed[j - 1]
        rows.append(
            CgroupRow(f"/{rel}", ns, pod_name, "", "", "", start, pod_stats,
                      res.get("cpu_shares"), None, 100000, res.get("memory_limit"), network)
        )  # fmt: skip
        for sb in sandboxes:
            st = parsed[j]
            j += 1
            if st.cpu_usage_ns is None and st.memory_working_set is None:
                continue  # not a cgroupfs layout: nothing to report per container
            # The kubelet does not know for sure which pause image the runtime used.
            rows.append(
                CgroupRow(f"/{rel}/{sb.id}", ns, pod_name, "", sb.id, "", sb.created_at / 1e9,
                          st, None, None, None, st.memory_limit)
            )  # fmt: skip
        specs = {c["name"]: c for c in p["spec"].get("containers", [])}
        specs.update({c["name"]: c for c in p["spec"].get("initContainers", [])})
        out = []
        for c in running:
            st = parsed[j]
            j += 1
            if st.cpu_usage_ns is None and st.memory_working_set is None:
                continue
            spec = specs.get(c.name)
            shares = quota = period = limit = None
            if spec is not None and network_io:
                shares, quota, period, limit = self._container_limits(p, spec)
            out.append(
                CgroupRow(f"/{rel}/{c.id}", ns, pod_name, c.name, c.id, c.image,
                          c.started_at / 1e9, st, shares, quota, period, limit)
            )  # fmt: skip
        rows.extend(out)
        return out

    def _pod_network(
        self, p: Pod, rel: str, sandboxes: list[SandboxStatus]
    ) -> tuple[Interface, ...]:
        """The interfaces of the pod's network namespace, read through any
        process of the pod (none for a host-network pod)."""
        if host_network(p):
            return ()
        pid = first_pid(self._procs_file(f"{rel}/{sandboxes[0].id}")) if sandboxes else None
        if pid is None:
            pid = first_pid(self._procs_file(rel))
        if pid is None:
            return ()
        return tuple(read_net_dev(f"/proc/{pid}/net/dev") or ())

    def _container_limits(
        self, p: Pod, spec: Container
    ) -> tuple[int | None, int | None, int | None, int | None]:
        """cpu shares, quota and period and the memory limit the container's
        cgroup was given (None: unset)."""
        if self.container_resources is None:
            return None, None, None, None
        r = self.container_resources(p, spec)
        period = r.cpu_period or 100000  # the kernel's default when unset
        return r.cpu_shares or None, r.cpu_quota or None, period, r.memory_limit_in_bytes or None

    def _extras(self, out: dict[str, Any], ts: str, st: CgroupStats) -> dict[str, Any]:
        """Swap, and with KubeletPSI the pressure, of one cgroup's summary."""
        cgroup_swap(out, ts, st)
        return cgroup_pressure(out, ts, st) if self.psi else out

    def _cpu_and_memory(self, key: str, now: float, ts: str, st: CgroupStats) -> dict[str, Any]:
        """The CPUStats and MemoryStats of one pod's or container's cgroup
        (key: what its usage rate is kept under)."""
        return {
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
        }

    def _container_summary(self, r: CgroupRow, now: float, ts: str) -> dict[str, Any]:
        st = r.stats
        out: dict[str, Any] = {
            "name": r.container,
            "startTime": meta_time_ns(int(r.start_time * 1e9)),
            **self._cpu_and_memory(r.name, now, ts, st),
        }
        return self._extras(out, ts, st)

    def _node(self, now: float, ts: str, root: CgroupStats) -> dict[str, Any]:
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
            node["memory"] = _node_memory(ts, mi["MemTotal"], root, mi)
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
        swap = node_swap(ts, mi)
        if swap is not None:
            node["swap"] = swap
        rlimit = pidlimit.rlimit(ts)
        if rlimit is not None:
            node["rlimit"] = rlimit
        if self.psi:
            pressure = [
                stats.read_psi(f"{self.proc_pressure}/{r}") for r in ("cpu", "memory", "io")
            ]
            add_pressure(node, ts, *pressure)
        return node


class ResourceMetrics(Collector):
    """/metrics/resource: the node and pod CPU and memory series metrics-server reads."""

    def __init__(self, provider: StatsProvider) -> None:
        self.provider = provider

    def collect(self) -> Iterator[Metric]:
        s, rows, when = self.provider.snapshot(RESOURCE_METRICS)
        node = s["node"]
        cpu = CounterMetricFamily(
            "node_cpu_usage_seconds", "Cumulative cpu time consumed by the node in core-seconds"
        )
        mem = GaugeMetricFamily(
            "node_memory_working_set_bytes", "Current working set of the node in bytes"
        )
        if node.get("cpu", {}).get("usageCoreNanoSeconds") is not None:
            cpu.add_metric([], node["cpu"]["usageCoreNanoSeconds"] / 1e9, timestamp=when)
        if node.get("memory", {}).get("workingSetBytes") is not None:
            mem.add_metric([], node["memory"]["workingSetBytes"], timestamp=when)
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
                pcpu.add_metric(labels, p["cpu"]["usageCoreNanoSeconds"] / 1e9, timestamp=when)
            if p["memory"]["workingSetBytes"] is not None:
                pmem.add_metric(labels, p["memory"]["workingSetBytes"], timestamp=when)
        # Per container: what metrics-server builds pod figures from.
        clabels = ["container", "namespace", "pod"]
        ccpu = CounterMetricFamily(
            "container_cpu_usage_seconds",
            "Cumulative cpu time consumed by the container in core-seconds",
            labels=clabels,
        )
        cmem = GaugeMetricFamily(
            "container_memory_working_set_bytes",
            "Current working set of the container in bytes",
            labels=clabels,
        )
        cstart = GaugeMetricFamily(
            "container_start_time_seconds",
            "Start time of the container since unix epoch in seconds",
            labels=clabels,
        )
        for r in rows:
            if not r.container:
                continue
            lv = [r.container, r.namespace, r.pod]
            if r.stats.cpu_usage_ns is not None:
                ccpu.add_metric(lv, r.stats.cpu_usage_ns / 1e9, timestamp=when)
            if r.stats.memory_working_set is not None:
                cmem.add_metric(lv, r.stats.memory_working_set, timestamp=when)
            cstart.add_metric(lv, r.start_time, timestamp=r.start_time)
        up = GaugeMetricFamily(
            "scrape_error", "1 if there was an error while getting container metrics, 0 otherwise"
        )
        up.add_metric([], 0)
        yield from (cpu, mem, pcpu, pmem, ccpu, cmem, cstart, up)


def resource_registry(provider: StatsProvider) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ResourceMetrics(provider))
    return reg


def _node_memory(
    ts: str, total: int, root: CgroupStats, mi: Mapping[str, int | None]
) -> dict[str, Any]:
    """The root cgroup's memory as upstream's summary gives the node's (and as
    eviction's memory.available reads it); /proc/meminfo where the root cgroup
    cannot be read."""
    ws = working_set(root)
    if ws is None:
        avail = mi.get("MemAvailable") or 0
        used = total - (mi.get("MemFree") or 0)
        return {"time": ts, "availableBytes": avail, "usageBytes": used,
                "workingSetBytes": total - avail}  # fmt: skip
    usage = root.memory_usage
    if usage is None and root.memory_rss is not None and root.memory_cache is not None:
        usage = root.memory_rss + root.memory_cache  # the v2 root: no memory.current
    return {
        "time": ts,
        "availableBytes": max(0, total - ws),
        "usageBytes": usage,
        "workingSetBytes": ws,
        "rssBytes": root.memory_rss,
        "pageFaults": root.pgfault,
        "majorPageFaults": root.pgmajfault,
    }
