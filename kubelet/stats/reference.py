"""Pure-Python reference for the cgroup and /proc stats parsers (pyx/cgstats.pyx).

The two must return equal results for any file contents, so the parsing rules
are exact and written down here:

- a number is 1 to 19 ASCII digits with a value <= 2**63-1 (no sign, no
  spaces); anything else makes that value absent (None);
- a single-value file (memory.current, pids.current, ...) is one number,
  optionally followed by one newline; "max" files may hold "max" (None);
- a flat-keyed file (cpu.stat, memory.stat, ...) has lines "key number"
  separated by exactly one space; malformed lines are skipped; the first
  occurrence of a key wins;
- io.stat: per line, space-separated items after the device, "rbytes=N" etc.,
  summed over devices; blkio files: lines "dev Read|Write N", summed; a sum
  that passes 2**63-1 is absent;
- PSI lines must read exactly "some|full avg10=W.FF avg60=W.FF avg300=W.FF
  total=N" with 1 to 9 digits W; averages are W*100+FF divided by 100.0;
  the first valid line of each kind wins; a file with neither is (None, None);
- v1 pressure comes from <root>/unified/<path>/ (the hybrid layout's v2 tree);
- v1 swap: memory.stat total_swap, else swap; memory.memsw.limit_in_bytes at
  or above 2**62 is no limit (None), as memory.limit_in_bytes;
- unit conversions that would pass 2**63-1 are absent;
- a missing, unreadable, empty or malformed file never raises.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

from kubelet.stats.types import FIELDS, FILE_BITS, PSI, V2_FILES, CgroupStats, PSILine, masks

MAX = 2**63 - 1
USER_HZ_NS = 10_000_000  # cpuacct.stat counts USER_HZ (100) ticks
V1_UNLIMITED = 2**62  # memory.limit_in_bytes at or above this means no limit

_PSI = re.compile(
    rb"(some|full) avg10=(\d{1,9})\.(\d\d) avg60=(\d{1,9})\.(\d\d) "
    rb"avg300=(\d{1,9})\.(\d\d) total=(\d{1,19})"
)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None


def _num(b: bytes) -> int | None:
    if 1 <= len(b) <= 19 and b.isdigit():
        v = int(b)
        return v if v <= MAX else None
    return None


def _single(data: bytes | None, allow_max: bool = False) -> tuple[bool, int | None]:
    """(is_max, value)."""
    if data is None:
        return False, None
    if data.endswith(b"\n"):
        data = data[:-1]
    if allow_max and data == b"max":
        return True, None
    return False, _num(data)


def _kv(data: bytes | None) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    if not data:
        return out
    for line in data.split(b"\n"):
        sp = line.find(b" ")
        if sp <= 0:
            continue
        key = line[:sp]
        v = _num(line[sp + 1 :])
        if v is not None and key not in out:
            out[key] = v
    return out


def _scale(v: int | None, factor: int) -> int | None:
    if v is None or v > MAX // factor:
        return None
    return v * factor


def _add(acc: dict[bytes, int | None], key: bytes, v: int) -> None:
    cur = acc.get(key, 0)
    if cur is None:
        return  # already overflowed
    s = cur + v
    acc[key] = s if s <= MAX else None


def _io_stat(data: bytes | None) -> tuple[int | None, ...]:
    acc: dict[bytes, int | None] = {}
    keys = (b"rbytes", b"wbytes", b"rios", b"wios")
    if data:
        for line in data.split(b"\n"):
            for item in line.split(b" ")[1:]:
                eq = item.find(b"=")
                if eq > 0 and item[:eq] in keys:
                    v = _num(item[eq + 1 :])
                    if v is not None:
                        _add(acc, item[:eq], v)
    return tuple(acc.get(k) for k in keys)


def _blkio(data: bytes | None) -> tuple[int | None, int | None]:
    acc: dict[bytes, int | None] = {}
    if data:
        for line in data.split(b"\n"):
            items = line.split(b" ")
            if len(items) == 3 and items[1] in (b"Read", b"Write"):
                v = _num(items[2])
                if v is not None:
                    _add(acc, items[1], v)
    return acc.get(b"Read"), acc.get(b"Write")


def _psi(data: bytes | None) -> PSI:
    if data is None:
        return None
    some: PSILine = None
    full: PSILine = None
    for line in data.split(b"\n"):
        m = _PSI.fullmatch(line)
        if m is None:
            continue
        total = _num(m.group(8))
        if total is None:
            continue
        vals = (
            (int(m.group(2)) * 100 + int(m.group(3))) / 100.0,
            (int(m.group(4)) * 100 + int(m.group(5))) / 100.0,
            (int(m.group(6)) * 100 + int(m.group(7))) / 100.0,
            total,
        )
        if m.group(1) == b"some":
            some = some or vals
        else:
            full = full or vals
    return (some, full)


def _working_set(usage: int | None, inactive: int | None) -> int | None:
    if usage is None:
        return None
    return max(0, usage - (inactive or 0))


def _v2(d: str, files: int) -> CgroupStats:
    def r(bit: int, name: str) -> bytes | None:
        return _read(f"{d}/{name}") if files & (1 << bit) else None

    cpu = _kv(r(0, "cpu.stat"))
    mem = _kv(r(1, "memory.stat"))
    _, usage = _single(r(2, "memory.current"))
    _, limit = _single(r(3, "memory.max"), allow_max=True)
    events = _kv(r(4, "memory.events"))
    rb, wb, rio, wio = _io_stat(r(5, "io.stat"))
    _, pids = _single(r(6, "pids.current"))
    _, pids_max = _single(r(7, "pids.max"), allow_max=True)
    cpu_p = _psi(r(8, "cpu.pressure"))
    mem_p = _psi(r(9, "memory.pressure"))
    io_p = _psi(r(10, "io.pressure"))
    _, swap = _single(r(11, "memory.swap.current"))
    _, swap_max = _single(r(12, "memory.swap.max"), allow_max=True)
    inactive = mem.get(b"inactive_file")
    return CgroupStats(
        _scale(cpu.get(b"usage_usec"), 1000),
        _scale(cpu.get(b"user_usec"), 1000),
        _scale(cpu.get(b"system_usec"), 1000),
        cpu.get(b"nr_periods"),
        cpu.get(b"nr_throttled"),
        _scale(cpu.get(b"throttled_usec"), 1000),
        usage,
        _working_set(usage, inactive),
        mem.get(b"anon"),
        mem.get(b"file"),
        inactive,
        limit,
        events.get(b"oom_kill"),
        mem.get(b"pgfault"),
        mem.get(b"pgmajfault"),
        rb,
        wb,
        rio,
        wio,
        pids,
        pids_max,
        swap,
        swap_max,
        cpu_p,
        mem_p,
        io_p,
    )


def _v1(root: str, path: str, files: int) -> CgroupStats:
    def f(bit: int, controller: str, name: str) -> bytes | None:
        if not files & (1 << bit):
            return None
        return _read(f"{root}/{controller}/{path}/{name}")

    _, usage_ns = _single(f(0, "cpuacct", "cpuacct.usage"))
    acct = _kv(f(0, "cpuacct", "cpuacct.stat"))
    cpu = _kv(f(0, "cpu", "cpu.stat"))
    # memory.stat also holds v1's swap usage.
    mem_stat = FILE_BITS["memory.stat"] | FILE_BITS["memory.swap.current"]
    mem = _kv(_read(f"{root}/memory/{path}/memory.stat") if files & mem_stat else None)
    _, usage = _single(f(2, "memory", "memory.usage_in_bytes"))
    _, limit = _single(f(3, "memory", "memory.limit_in_bytes"))
    if limit is not None and limit >= V1_UNLIMITED:
        limit = None
    oom = _kv(f(4, "memory", "memory.oom_control"))
    rb, wb = _blkio(f(5, "blkio", "blkio.throttle.io_service_bytes"))
    rio, wio = _blkio(f(5, "blkio", "blkio.throttle.io_serviced"))
    _, pids = _single(f(6, "pids", "pids.current"))
    _, pids_max = _single(f(7, "pids", "pids.max"), allow_max=True)
    _, memsw = _single(f(12, "memory", "memory.memsw.limit_in_bytes"))
    if memsw is not None and memsw >= V1_UNLIMITED:
        memsw = None

    def m(key: bytes) -> int | None:
        v = mem.get(b"total_" + key)
        return v if v is not None else mem.get(key)

    inactive = m(b"inactive_file")
    return CgroupStats(
        usage_ns,
        _scale(acct.get(b"user"), USER_HZ_NS),
        _scale(acct.get(b"system"), USER_HZ_NS),
        cpu.get(b"nr_periods"),
        cpu.get(b"nr_throttled"),
        cpu.get(b"throttled_time"),
        usage,
        _working_set(usage, inactive),
        m(b"rss"),
        m(b"cache"),
        inactive,
        limit,
        oom.get(b"oom_kill"),
        m(b"pgfault"),
        m(b"pgmajfault"),
        rb,
        wb,
        rio,
        wio,
        pids,
        pids_max,
        m(b"swap") if files & (1 << 11) else None,
        memsw,
        _psi(f(8, "unified", "cpu.pressure")),
        _psi(f(9, "unified", "memory.pressure")),
        _psi(f(10, "unified", "io.pressure")),
    )


def _only(st: CgroupStats, fmask: int) -> CgroupStats:
    out = copy.copy(st)
    for k, field in enumerate(FIELDS):
        if not fmask >> k & 1:
            setattr(out, field, None)
    return out


def parse_cgroups(
    paths: list[str],
    version: int,
    root: str = "/sys/fs/cgroup",
    threads: int = 0,
    fields: frozenset[str] | None = None,
) -> list[CgroupStats]:
    """Stats of each cgroup path (relative to the hierarchy root), in order.

    v2: files under <root>/<path>/; v1: under <root>/<controller>/<path>/.
    fields: the CgroupStats fields wanted (None: all); only the files they
    need are read and the other fields are None. threads: unused here.
    """
    fmask, files = masks(None if fields is None else frozenset(fields))
    if version == 2:
        out = [_v2(f"{root}/{p}", files) for p in paths]
    elif version == 1:
        out = [_v1(root, p, files) for p in paths]
    else:
        raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
    if fmask != (1 << len(FIELDS)) - 1:
        out = [_only(st, fmask) for st in out]
    return out


class CgroupReader:
    """The reference twin of cgstats.CgroupReader: the same interface and the
    same budget accounting (which cgroups hold a place), but every read opens
    the files by path: what a kept descriptor must always agree with."""

    def __init__(
        self,
        version: int,
        root: str = "/sys/fs/cgroup",
        fields: frozenset[str] | None = None,
        max_fds: int = 0,
        threads: int = 0,
        keep: frozenset[str] | None = None,
    ) -> None:
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
        self.version = version
        self.root = root
        self.fields = None if fields is None else frozenset(fields)
        self._fmask, files = masks(self.fields)
        kept_files = files if keep is None else masks(frozenset(keep))[1]
        if kept_files | files != files:
            raise ValueError("keep: fields outside the reader's own field set")
        nfiles = bin(kept_files).count("1")
        self._slots = max(0, max_fds) // nfiles if version == 2 and nfiles else 0
        self._kept: dict[str, None] = {}

    @property
    def capacity(self) -> int:
        return self._slots

    @property
    def kept(self) -> frozenset[str]:
        return frozenset(self._kept)

    def read(self, paths: list[str], fields: frozenset[str] | None = None) -> list[CgroupStats]:
        if fields is not None:
            fm, _ = masks(frozenset(fields))
            if self._fmask | fm != self._fmask:
                raise ValueError("fields outside the reader's own field set")
        for p in paths:
            if p not in self._kept and len(self._kept) < self._slots:
                self._kept[p] = None
        return parse_cgroups(
            paths, self.version, self.root, fields=self.fields if fields is None else fields
        )

    def retain(self, paths: list[str] | set[str] | frozenset[str]) -> None:
        wanted = set(paths)
        for p in [p for p in self._kept if p not in wanted]:
            del self._kept[p]

    def close(self) -> None:
        self._kept.clear()


def floor_read(
    paths: list[str],
    root: str = "/sys/fs/cgroup",
    fields: frozenset[str] | None = None,
    threads: int = 0,
) -> int:
    """Open + read + close of the files parse_cgroups reads (v2), no parsing."""
    _, files = masks(None if fields is None else frozenset(fields))
    names = [n for k, n in enumerate(V2_FILES) if files & (1 << k)]
    total = 0
    for p in paths:
        for n in names:
            data = _read(f"{root}/{p}/{n}")
            total += len(data or b"")
    return total


def read_psi(path: str) -> PSI:
    """One pressure file (/proc/pressure/<resource>, or a cgroup's): (some,
    full) by the rules above; None when it cannot be read."""
    return _psi(_read(path))


def read_proc_stat(path: str = "/proc/stat") -> dict[str, Any] | None:
    """cpu: (user, nice, system, idle, iowait, irq, softirq, steal) ticks; and counters."""
    data = _read(path)
    if data is None:
        return None
    out: dict[str, Any] = {"cpu": None}
    kv = _kv(data)
    for key in ("ctxt", "processes", "procs_running", "procs_blocked"):
        out[key] = kv.get(key.encode())
    for line in data.split(b"\n"):
        if line.startswith(b"cpu "):
            items = line[4:].lstrip(b" ").split(b" ")
            vals = [_num(x) for x in items[:8]]
            if len(vals) == 8 and all(v is not None for v in vals):
                out["cpu"] = tuple(vals)
            break
    return out


_MEMINFO = (
    b"MemTotal",
    b"MemFree",
    b"MemAvailable",
    b"Buffers",
    b"Cached",
    b"SwapTotal",
    b"SwapFree",
)


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, int | None] | None:
    """The main /proc/meminfo fields in bytes (lines "Key:<spaces>N kB")."""
    data = _read(path)
    if data is None:
        return None
    found: dict[bytes, int | None] = {}
    for line in data.split(b"\n"):
        colon = line.find(b":")
        if colon <= 0:
            continue
        key = line[:colon]
        if key not in _MEMINFO or key in found:
            continue
        rest = line[colon + 1 :].lstrip(b" ")
        if not rest.endswith(b" kB"):
            found[key] = None
            continue
        found[key] = _scale(_num(rest[:-3]), 1024)
    return {k.decode(): found.get(k) for k in _MEMINFO}


def read_loadavg(path: str = "/proc/loadavg") -> tuple[float, float, float, int, int] | None:
    data = _read(path)
    if data is None:
        return None
    m = re.fullmatch(
        rb"(\d{1,9})\.(\d\d) (\d{1,9})\.(\d\d) (\d{1,9})\.(\d\d) (\d{1,19})/(\d{1,19}) (\d{1,19})\n?",
        data,
    )
    if m is None:
        return None
    running, total = _num(m.group(7)), _num(m.group(8))
    if running is None or total is None or _num(m.group(9)) is None:
        return None
    return (
        (int(m.group(1)) * 100 + int(m.group(2))) / 100.0,
        (int(m.group(3)) * 100 + int(m.group(4))) / 100.0,
        (int(m.group(5)) * 100 + int(m.group(6))) / 100.0,
        running,
        total,
    )


# Fields of /proc/<pid>/stat counted from the state (field 3) after the command.
_PID_FIELDS = (("utime", 11), ("stime", 12), ("num_threads", 17), ("starttime", 19),
               ("vsize", 20), ("rss", 21))  # fmt: skip


def read_pid_stat(pid: int, proc: str = "/proc") -> dict[str, int | None] | None:
    """utime/stime (ticks), num_threads, starttime (ticks), vsize (bytes), rss (pages)."""
    data = _read(f"{proc}/{pid}/stat")
    if data is None:
        return None
    close = data.rfind(b")")  # the command may itself contain ")" and spaces
    if close < 0:
        return None
    items = data[close + 1 :].strip(b" \n").split(b" ")
    return {name: (_num(items[i]) if i < len(items) else None) for name, i in _PID_FIELDS}


def fs_usage(path: str) -> dict[str, int] | None:
    """Capacity, available and used bytes and inodes of the filesystem holding path."""
    try:
        st = os.statvfs(path)
    except (OSError, ValueError):
        return None
    return {
        "capacity": st.f_blocks * st.f_frsize,
        "available": st.f_bavail * st.f_frsize,
        "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
        "inodes": st.f_files,
        "inodes_free": st.f_ffree,
        "inodes_used": st.f_files - st.f_ffree,
    }
