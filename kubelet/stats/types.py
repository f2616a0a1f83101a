"""Result types shared by the native (Cython) and reference stats parsers, so both
return equal objects for equal input."""

from __future__ import annotations

# (avg10, avg60, avg300, total) for one PSI line; None when that line is absent.
PSILine = tuple[float, float, float, int] | None
# (some, full) for one resource's pressure file; None when the file is absent.
PSI = tuple[PSILine, PSILine] | None

FIELDS = (
    "cpu_usage_ns",
    "cpu_user_ns",
    "cpu_system_ns",
    "cpu_nr_periods",
    "cpu_nr_throttled",
    "cpu_throttled_ns",
    "memory_usage",
    "memory_working_set",
    "memory_rss",
    "memory_cache",
    "memory_inactive_file",
    "memory_limit",
    "memory_oom_kill",
    "pgfault",
    "pgmajfault",
    "io_read_bytes",
    "io_write_bytes",
    "io_read_ops",
    "io_write_ops",
    "pids_current",
    "pids_max",
    "swap_usage",
    "swap_limit",
    "cpu_pressure",
    "memory_pressure",
    "io_pressure",
)


class CgroupStats:
    """One cgroup's stats. Every field is None when its file is missing,
    unreadable or malformed; memory_limit, pids_max and swap_limit are also
    None for "max" (v1: 2**62 and above). swap_usage/swap_limit are what
    cAdvisor reports: v2 memory.swap.current / memory.swap.max; v1 the
    memory.stat total_swap (else swap) / memory.memsw.limit_in_bytes (memory
    plus swap, as cAdvisor's v1 SwapLimit)."""

    __slots__ = FIELDS

    # One assignment per slot, not a setattr loop: a batch builds 10,000 of these
    # and the loop cost ~1.6 us each, a tenth of the native parse of a whole cgroup.
    def __init__(
        self,
        cpu_usage_ns: int | None,
        cpu_user_ns: int | None,
        cpu_system_ns: int | None,
        cpu_nr_periods: int | None,
        cpu_nr_throttled: int | None,
        cpu_throttled_ns: int | None,
        memory_usage: int | None,
        memory_working_set: int | None,
        memory_rss: int | None,
        memory_cache: int | None,
        memory_inactive_file: int | None,
        memory_limit: int | None,
        memory_oom_kill: int | None,
        pgfault: int | None,
        pgmajfault: int | None,
        io_read_bytes: int | None,
        io_write_bytes: int | None,
        io_read_ops: int | None,
        io_write_ops: int | None,
        pids_current: int | None,
        pids_max: int | None,
        swap_usage: int | None,
        swap_limit: int | None,
        cpu_pressure: PSI,
        memory_pressure: PSI,
        io_pressure: PSI,
    ) -> None:
        self.cpu_usage_ns = cpu_usage_ns
        self.cpu_user_ns = cpu_user_ns
        self.cpu_system_ns = cpu_system_ns
        self.cpu_nr_periods = cpu_nr_periods
        self.cpu_nr_throttled = cpu_nr_throttled
        self.cpu_throttled_ns = cpu_throttled_ns
        self.memory_usage = memory_usage
        self.memory_working_set = memory_working_set
        self.memory_rss = memory_rss
        self.memory_cache = memory_cache
        self.memory_inactive_file = memory_inactive_file
        self.memory_limit = memory_limit
        self.memory_oom_kill = memory_oom_kill
        self.pgfault = pgfault
        self.pgmajfault = pgmajfault
        self.io_read_bytes = io_read_bytes
        self.io_write_bytes = io_write_bytes
        self.io_read_ops = io_read_ops
        self.io_write_ops = io_write_ops
        self.pids_current = pids_current
        self.pids_max = pids_max
        self.swap_usage = swap_usage
        self.swap_limit = swap_limit
        self.cpu_pressure = cpu_pressure
        self.memory_pressure = memory_pressure
        self.io_pressure = io_pressure

    def as_tuple(self) -> tuple[int | PSI, ...]:
        return tuple(getattr(self, f) for f in FIELDS)

    def as_dict(self) -> dict[str, int | PSI]:
        return {f: getattr(self, f) for f in FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CgroupStats) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items() if v is not None)
        return f"CgroupStats({inner})"


# cgroup v2 files the parsers read, one bit each (FILE_BITS order). v1 reads the
# counterparts named in reference._v1 (cpu: cpuacct.usage, cpuacct.stat and
# cpu.stat; io: the two blkio.throttle files; swap: memory.stat and
# memory.memsw.limit_in_bytes). v1 has no pressure files of its own: on a
# hybrid host they are read from the same path in the unified tree
# (<root>/unified/<path>/*.pressure), where runc makes every cgroup too.
V2_FILES = (
    "cpu.stat",
    "memory.stat",
    "memory.current",
    "memory.max",
    "memory.events",
    "io.stat",
    "pids.current",
    "pids.max",
    "cpu.pressure",
    "memory.pressure",
    "io.pressure",
    "memory.swap.current",
    "memory.swap.max",
)
FILE_BITS = {name: 1 << i for i, name in enumerate(V2_FILES)}
ALL_FILES = (1 << len(V2_FILES)) - 1

# The files each field needs (the working set is usage minus inactive_file).
_FIELD_FILES = {
    "cpu_usage_ns": ("cpu.stat",),
    "cpu_user_ns": ("cpu.stat",),
    "cpu_system_ns": ("cpu.stat",),
    "cpu_nr_periods": ("cpu.stat",),
    "cpu_nr_throttled": ("cpu.stat",),
    "cpu_throttled_ns": ("cpu.stat",),
    "memory_usage": ("memory.current",),
    "memory_working_set": ("memory.current", "memory.stat"),
    "memory_rss": ("memory.stat",),
    "memory_cache": ("memory.stat",),
    "memory_inactive_file": ("memory.stat",),
    "memory_limit": ("memory.max",),
    "memory_oom_kill": ("memory.events",),
    "pgfault": ("memory.stat",),
    "pgmajfault": ("memory.stat",),
    "io_read_bytes": ("io.stat",),
    "io_write_bytes": ("io.stat",),
    "io_read_ops": ("io.stat",),
    "io_write_ops": ("io.stat",),
    "pids_current": ("pids.current",),
    "pids_max": ("pids.max",),
    "swap_usage": ("memory.swap.current",),
    "swap_limit": ("memory.swap.max",),
    "cpu_pressure": ("cpu.pressure",),
    "memory_pressure": ("memory.pressure",),
    "io_pressure": ("io.pressure",),
}
ALL_FIELDS = (1 << len(FIELDS)) - 1

# What each consumer reads per pod cgroup (the Go kubelet's fields in brackets):
# - eviction ranking: the working set [memory.workingSetBytes], 2 files;
# - /metrics/resource: pod_cpu_usage_seconds and pod_memory_working_set_bytes
#   [cpu.usageCoreNanoSeconds, memory.workingSetBytes], 3 files;
# - /stats/summary, pods: cpu usage, memory usage, working set, rss, page
#   faults, process count [CPUStats, MemoryStats without availableBytes,
#   ProcessStats], 4 files;
# - /metrics/cadvisor: every field (cpu throttling, memory limit and OOM
#   kills, io, pids.max, swap and pressure too), all 13 files.
# The summary adds swap [SwapStats] (2 files) and, with KubeletPSI,
# pressure [CPUStats.PSI, MemoryStats.PSI, IOStats.PSI] (3 files).
EVICTION = frozenset({"memory_working_set"})
PIDS = frozenset({"pids_current"})  # eviction's PID pressure ranking
RESOURCE_METRICS = frozenset({"cpu_usage_ns", "memory_working_set"})
SUMMARY = frozenset(
    {"cpu_usage_ns", "memory_usage", "memory_working_set", "memory_rss", "pgfault",
     "pgmajfault", "pids_current", "swap_usage", "swap_limit",
     "memory_cache", "memory_inactive_file"}  # the v2 root's working set (working_set)
)  # fmt: skip
PSI_FIELDS = frozenset({"cpu_pressure", "memory_pressure", "io_pressure"})
CADVISOR = frozenset(FIELDS)


def masks(fields: frozenset[str] | None) -> tuple[int, int]:
    """(field bits in FIELDS order, file bits in V2_FILES order) for a field
    set; None is every field. Unknown names are an error, not a silent None."""
    if fields is None:
        return ALL_FIELDS, ALL_FILES
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown cgroup stats fields: {sorted(unknown)}")
    fmask = 0
    files = 0
    for f in fields:
        fmask |= 1 << FIELDS.index(f)
        for name in _FIELD_FILES[f]:
            files |= FILE_BITS[name]
    return fmask, files


def files_of(fields: frozenset[str] | None) -> list[str]:
    """The v2 file names a field set reads, in read order."""
    _, files = masks(fields)
    return [name for name in V2_FILES if files & FILE_BITS[name]]


def working_set(st: CgroupStats) -> int | None:
    """The cgroup's working set. The v2 root has no memory.current: its usage
    is memory.stat's anon + file there, as runc reports the root."""
    if st.memory_working_set is not None:
        return int(st.memory_working_set)
    if st.memory_rss is None or st.memory_cache is None:
        return None
    return max(0, st.memory_rss + st.memory_cache - (st.memory_inactive_file or 0))
