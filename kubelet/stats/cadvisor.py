"""/metrics/cadvisor: the container_* series cAdvisor exports, with the label set
the kubelet gives them (container, id, image, name, namespace, pod), read from
the stats provider's last collection: the root cgroup, each pod's cgroup and
the cgroups of its running containers and sandbox.

With KubeletPSI (beta, on), the six container_pressure_{cpu,memory,io}_
{stalled,waiting}_seconds_total counters, from the full and some totals of the
cgroup's pressure files (microseconds to seconds, as cAdvisor); only for cgroups
whose pressure files exist.

Left out, each because this kubelet has no source for it yet: per-CPU usage
(the kubelet asks cAdvisor for the total only, labelled cpu="total"),
per-device block I/O, per-container writable-layer usage (a CRI
ListContainerStats figure) and load averages.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kubelet.nodestatus.machine import MachineInfo
from kubelet.stats.provider import CgroupRow, StatsProvider
from kubelet.stats.types import PSI

LABELS = ["container", "id", "image", "name", "namespace", "pod"]
NET = (
    ("receive_bytes_total", "Cumulative count of bytes received", "rx_bytes"),
    ("receive_packets_total", "Cumulative count of packets received", "rx_packets"),
    ("receive_errors_total", "Cumulative count of errors encountered while receiving", "rx_errors"),
    ("receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", "rx_dropped"),
    ("transmit_bytes_total", "Cumulative count of bytes transmitted", "tx_bytes"),
    ("transmit_packets_total", "Cumulative count of packets transmitted", "tx_packets"),
    ("transmit_errors_total", "Cumulative count of errors encountered while transmitting", "tx_errors"),
    ("transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", "tx_dropped"),
)  # fmt: skip
# (resource, cAdvisor's word for it in the help text)
PRESSURE = (("cpu", "CPU"), ("memory", "memory"), ("io", "IO"))


def _pressure_counters() -> dict[tuple[str, str], CounterMetricFamily]:
    """(resource, "full"|"some") -> its counter family."""
    out = {}
    for res, word in PRESSURE:
        out[(res, "full")] = CounterMetricFamily(
            f"container_pressure_{res}_stalled_seconds",
            f"Total time duration no tasks in the container could make progress due to {word} congestion.",
            labels=LABELS,
        )
        out[(res, "some")] = CounterMetricFamily(
            f"container_pressure_{res}_waiting_seconds",
            f"Total time duration tasks in the container have waited due to {word} congestion.",
            labels=LABELS,
        )
    return out


def _labels(r: CgroupRow) -> list[str]:
    return [r.container, r.id, r.image, r.name, r.namespace, r.pod]


def _device_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The mount source of the filesystem holding path (cAdvisor's device label)."""
    try:
        st = os.stat(path)
        want = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        with open(mountinfo) as fh:
            for line in fh:
                pre, _, post = line.partition(" - ")
                fields, post_fields = pre.split(), post.split()
                if len(fields) > 2 and fields[2] == want and len(post_fields) > 1:
                    return post_fields[1]
    except (OSError, ValueError):
        pass
    return ""


class CadvisorMetrics(Collector):
    def __init__(self, provider: StatsProvider, machine: MachineInfo) -> None:
        self.provider = provider
        self.machine = machine
        self.root_device = _device_of(provider.root_dir)

    def collect(self) -> Iterator[Metric]:
        summary, rows, when = self.provider.snapshot()
        fams = _Families(self.provider.psi)
        for r in rows:
            fams.add(r, when)
            if r.id == "/":
                fs = summary["node"].get("fs")
                if fs is not None and self.root_device:
                    dev = (self.root_device,)
                    fams.put(fams.fs_usage, _labels(r), when, fs["usedBytes"], 1.0, dev)
                    fams.put(fams.fs_limit, _labels(r), when, fs["capacityBytes"], 1.0, dev)
        yield from fams.all()
        yield from _machine_families(self.machine)


Family = GaugeMetricFamily | CounterMetricFamily


def _gauge(n: str, doc: str, extra: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(n, doc, labels=LABELS + (extra or []))


def _counter(n: str, doc: str, extra: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(n, doc, labels=LABELS + (extra or []))


class _Families:
    """The container_* families of one scrape, filled row by row."""

    def __init__(self, psi: bool) -> None:
        g, c = _gauge, _counter
        self.last_seen = g("container_last_seen", "Last time a container was seen by the exporter")
        self.start = g("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")  # fmt: skip
        self.user = c("container_cpu_user_seconds", "Cumulative user cpu time consumed in seconds.")  # fmt: skip
        self.system = c("container_cpu_system_seconds", "Cumulative system cpu time consumed in seconds.")  # fmt: skip
        self.usage = c("container_cpu_usage_seconds", "Cumulative cpu time consumed in seconds.", ["cpu"])  # fmt: skip
        self.periods = c("container_cpu_cfs_periods", "Number of elapsed enforcement period intervals.")  # fmt: skip
        self.throttled = c("container_cpu_cfs_throttled_periods", "Number of throttled period intervals.")  # fmt: skip
        self.throttled_s = c("container_cpu_cfs_throttled_seconds", "Total time duration the container has been throttled.")  # fmt: skip
        self.cache = g("container_memory_cache", "Number of bytes of page cache memory.")
        self.rss = g("container_memory_rss", "Size of RSS in bytes.")
        self.mem = g("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")  # fmt: skip
        self.ws = g("container_memory_working_set_bytes", "Current working set in bytes.")
        self.failures = c("container_memory_failures", "Cumulative count of memory allocation failures.", ["failure_type", "scope"])  # fmt: skip
        self.oom = c("container_oom_events", "Count of out of memory events observed for the container")  # fmt: skip
        self.threads = g("container_threads", "Number of threads running inside the container")
        self.threads_max = g("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero")  # fmt: skip
        self.shares = g("container_spec_cpu_shares", "CPU share of the container.")
        self.quota = g("container_spec_cpu_quota", "CPU quota of the container.")
        self.period = g("container_spec_cpu_period", "CPU period of the container.")
        self.mem_limit = g("container_spec_memory_limit_bytes", "Memory limit for the container.")
        self.swap = g("container_memory_swap", "Container swap usage in bytes.")
        self.swap_limit = g("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")  # fmt: skip
        self.pressure = _pressure_counters() if psi else {}
        self.fs_usage = g("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", ["device"])  # fmt: skip
        self.fs_limit = g("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", ["device"])  # fmt: skip
        self.net = {
            attr: c(f"container_network_{n.removesuffix('_total')}", doc, ["interface"])
            for n, doc, attr in NET
        }

    @staticmethod
    def put(
        fam: Family,
        lv: list[str],
        when: float,
        v: int | None,
        scale: float = 1.0,
        extra: tuple[str, ...] = (),
    ) -> None:
        if v is not None:
            fam.add_metric([*lv, *extra], v / scale, timestamp=when)

    def add(self, r: CgroupRow, when: float) -> None:
        lv, st = _labels(r), r.stats
        self.last_seen.add_metric(lv, float(int(when)), timestamp=when)
        self.start.add_metric(lv, float(int(r.start_time)))
        for fam, spec in ((self.shares, r.cpu_shares), (self.period, r.cpu_period),
                          (self.quota, r.cpu_quota)):  # fmt: skip
            if spec is not None:
                fam.add_metric(lv, spec)
        self.mem_limit.add_metric(lv, r.memory_limit or 0)  # cAdvisor writes 0 for "no limit"
        if st.swap_usage is not None or st.swap_limit is not None:
            self.swap_limit.add_metric(lv, st.swap_limit or 0)

        def put(
            fam: Family, v: int | None, scale: float = 1.0, extra: tuple[str, ...] = ()
        ) -> None:
            self.put(fam, lv, when, v, scale, extra)

        put(self.user, st.cpu_user_ns, 1e9)
        put(self.system, st.cpu_system_ns, 1e9)
        put(self.usage, st.cpu_usage_ns, 1e9, ("total",))
        if r.cpu_quota is not None:  # as cAdvisor: CFS series only under a quota
            put(self.periods, st.cpu_nr_periods)
            put(self.throttled, st.cpu_nr_throttled)
            put(self.throttled_s, st.cpu_throttled_ns, 1e9)
        for fam, v in ((self.cache, st.memory_cache), (self.rss, st.memory_rss),
                       (self.mem, st.memory_usage), (self.ws, st.memory_working_set)):  # fmt: skip
            put(fam, v)
        # memory.stat is read hierarchically (total_* on v1): the "hierarchy" scope.
        put(self.failures, st.pgfault, 1.0, ("pgfault", "hierarchy"))
        put(self.failures, st.pgmajfault, 1.0, ("pgmajfault", "hierarchy"))
        put(self.oom, st.memory_oom_kill)
        put(self.swap, st.swap_usage)
        psi: tuple[PSI, ...] = (st.cpu_pressure, st.memory_pressure, st.io_pressure)
        for (res, _word), p in zip(PRESSURE, psi if self.pressure else (), strict=False):
            if p is None:
                continue
            for kind, line in (("some", p[0]), ("full", p[1])):
                put(self.pressure[(res, kind)], line[3] if line else 0, 1e6)
        put(self.threads, st.pids_current)
        if st.pids_current is not None:
            put(self.threads_max, st.pids_max or 0)
        for iface in r.network:
            for attr, counter in self.net.items():
                counter.add_metric([*lv, iface.name], getattr(iface, attr), timestamp=when)

    def all(self) -> Iterator[Metric]:
        yield from (self.last_seen, self.start, self.user, self.system, self.usage)
        yield from (self.periods, self.throttled, self.throttled_s)
        yield from (self.cache, self.rss, self.mem, self.ws, self.failures, self.oom)
        yield from (self.threads, self.threads_max, self.shares, self.quota, self.period)
        yield from (self.mem_limit, self.swap, self.swap_limit, *self.pressure.values())
        yield from (self.fs_usage, self.fs_limit, *self.net.values())


def _machine_families(m: MachineInfo) -> Iterator[Metric]:
    machine_labels = ["boot_id", "machine_id", "system_uuid"]
    mv = [m.boot_id, m.machine_id, m.system_uuid]
    cores = GaugeMetricFamily("machine_cpu_cores", "Number of logical CPU cores.", labels=machine_labels)  # fmt: skip
    cores.add_metric(mv, m.num_cores)
    memory = GaugeMetricFamily("machine_memory_bytes", "Amount of memory installed on the machine.", labels=machine_labels)  # fmt: skip
    memory.add_metric(mv, m.memory_capacity)
    err = GaugeMetricFamily("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise")  # fmt: skip
    err.add_metric([], 0)
    yield from (cores, memory, err)


def cadvisor_registry(provider: StatsProvider, machine: MachineInfo) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CadvisorMetrics(provider, machine))
    return reg
