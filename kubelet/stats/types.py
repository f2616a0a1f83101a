"""Result types shared by the native (Cython) and reference stats parsers, so both
return equal objects for equal input."""

from __future__ import annotations

from typing import Any

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
    "cpu_pressure",
    "memory_pressure",
    "io_pressure",
)


class CgroupStats:
    """One cgroup's stats. Every field is None when its file is missing,
    unreadable or malformed; memory_limit and pids_max are also None for "max"."""

    __slots__ = FIELDS

    def __init__(self, *values: Any) -> None:
        for name, v in zip(FIELDS, values, strict=True):
            setattr(self, name, v)

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in FIELDS)

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CgroupStats) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items() if v is not None)
        return f"CgroupStats({inner})"
