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
from typing import Any

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

        def gauge(n: str, doc: str, extra: list[str] | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(n, doc, labels=LABELS + (extra or []))

        def counter(n: str, doc: str, extra: list[str] | None = None) -> CounterMetricFamily:
            return CounterMetricFamily(n, doc, labels=LABELS + (extra or []))

        last_seen = gauge("container_last_seen", "Last time a container was seen by the exporter")
        start = gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")  # fmt: skip
        user = counter(
            "container_cpu_user_seconds", "Cumulative user cpu time consumed in seconds."
        )
        system = counter("container_cpu_system_seconds", "Cumulative system cpu time consumed in seconds.")  # fmt: skip
        usage = counter("container_cpu_usage_seconds", "Cumulative cpu time consumed in seconds.", ["cpu"])  # fmt: skip
        periods = counter("container_cpu_cfs_periods", "Number of elapsed enforcement period intervals.")  # fmt: skip
        throttled = counter("container_cpu_cfs_throttled_periods", "Number of throttled period intervals.")  # fmt: skip
        throttled_s = counter("container_cpu_cfs_throttled_seconds", "Total time duration the container has been throttled.")  # fmt: skip
        cache = gauge("container_memory_cache", "Number of bytes of page cache memory.")
        rss = gauge("container_memory_rss", "Size of RSS in bytes.")
        mem = gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")  # fmt: skip
        ws = gauge("container_memory_working_set_bytes", "Current working set in bytes.")
        failures = counter("container_memory_failures", "Cumulative count of memory allocation failures.", ["failure_type", "scope"])  # fmt: skip
        oom = counter("container_oom_events", "Count of out of memory events observed for the container")  # fmt: skip
        threads = gauge("container_threads", "Number of threads running inside the container")
        threads_max = gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero")  # fmt: skip
        shares = gauge("container_spec_cpu_shares", "CPU share of the container.")
        quota = gauge("container_spec_cpu_quota", "CPU quota of the container.")
        period = gauge("container_spec_cpu_period", "CPU period of the container.")
        mem_limit = gauge("container_spec_memory_limit_bytes", "Memory limit for the container.")
        swap = gauge("container_memory_swap", "Container swap usage in bytes.")
        swap_limit = gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")  # fmt: skip
        pressure = _pressure_counters() if self.provider.psi else {}
        fs_usage = gauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", ["device"])  # fmt: skip
        fs_limit = gauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", ["device"])  # fmt: skip
        net = {
            attr: counter(f"container_network_{n.removesuffix('_total')}", doc, ["interface"])
            for n, doc, attr in NET
        }

        for r in rows:
            lv = _labels(r)
            st = r.stats
            last_seen.add_metric(lv, float(int(when)), timestamp=when)
            start.add_metric(lv, float(int(r.start_time)))
            if r.cpu_shares is not None:
                shares.add_metric(lv, r.cpu_shares)
            if r.cpu_period is not None:
                period.add_metric(lv, r.cpu_period)
            if r.cpu_quota is not None:
                quota.add_metric(lv, r.cpu_quota)
            # cAdvisor writes 0 for "no limit".
            mem_limit.add_metric(lv, r.memory_limit or 0)
            if st.swap_usage is not None or st.swap_limit is not None:
                swap_limit.add_metric(lv, st.swap_limit or 0)

            def put(
                fam: Any,
                v: int | None,
                scale: float = 1.0,
                extra: tuple[str, ...] = (),
                lv: list[str] = lv,
            ) -> None:
                if v is not None:
                    fam.add_metric([*lv, *extra], v / scale, timestamp=when)

            put(user, st.cpu_user_ns, 1e9)
            put(system, st.cpu_system_ns, 1e9)
            put(usage, st.cpu_usage_ns, 1e9, ("total",))
            if r.cpu_quota is not None:  # as cAdvisor: CFS series only under a quota
                put(periods, st.cpu_nr_periods)
                put(throttled, st.cpu_nr_throttled)
                put(throttled_s, st.cpu_throttled_ns, 1e9)
            put(cache, st.memory_cache)
            put(rss, st.memory_rss)
            put(mem, st.memory_usage)
            put(ws, st.memory_working_set)
            # memory.stat is read hierarchically (total_* on v1): the "hierarchy" scope.
            put(failures, st.pgfault, 1.0, ("pgfault", "hierarchy"))
            put(failures, st.pgmajfault, 1.0, ("pgmajfault", "hierarchy"))
            put(oom, st.memory_oom_kill)
            put(swap, st.swap_usage)
            psi: tuple[PSI, ...] = (st.cpu_pressure, st.memory_pressure, st.io_pressure)
            for (res, _word), p in zip(PRESSURE, psi if pressure else (), strict=False):
                if p is None:
                    continue
                for kind, line in (("some", p[0]), ("full", p[1])):
                    put(pressure[(res, kind)], line[3] if line else 0, 1e6)
            put(threads, st.pids_current)
            if st.pids_current is not None:
                put(threads_max, st.pids_max or 0)
            for iface in r.network:
                for attr, fam in net.items():
                    fam.add_metric([*lv, iface.name], getattr(iface, attr), timestamp=when)
            if r.id == "/":
                fs = summary["node"].get("fs")
                if fs is not None and self.root_device:
                    put(fs_usage, fs["usedBytes"], 1.0, (self.root_device,))
                    put(fs_limit, fs["capacityBytes"], 1.0, (self.root_device,))

        m = self.machine
        machine_labels = ["boot_id", "machine_id", "system_uuid"]
        mv = [m.boot_id, m.machine_id, m.system_uuid]
        cores = GaugeMetricFamily("machine_cpu_cores", "Number of logical CPU cores.", labels=machine_labels)  # fmt: skip
        cores.add_metric(mv, m.num_cores)
        memory = GaugeMetricFamily("machine_memory_bytes", "Amount of memory installed on the machine.", labels=machine_labels)  # fmt: skip
        memory.add_metric(mv, m.memory_capacity)
        err = GaugeMetricFamily("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise")  # fmt: skip
        err.add_metric([], 0)
        yield from (last_seen, start, user, system, usage, periods, throttled, throttled_s)
        yield from (cache, rss, mem, ws, failures, oom, threads, threads_max)
        yield from (shares, quota, period, mem_limit, swap, swap_limit, *pressure.values())
        yield from (fs_usage, fs_limit, *net.values())
        yield from (cores, memory, err)


def cadvisor_registry(provider: StatsProvider, machine: MachineInfo) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CadvisorMetrics(provider, machine))
    return reg
