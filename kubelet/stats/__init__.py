"""cgroup and /proc stats parsers: Cython (kubelet.stats.cgstats, built from
pyx/cgstats.pyx) by default, the pure-Python reference with KUBELET_IMPL=reference.

    parse_cgroups(paths, version, root) -> list[CgroupStats]   one call per batch
    read_proc_stat(), read_meminfo(), read_loadavg(), read_pid_stat(pid), fs_usage(path)
"""

from __future__ import annotations

from types import ModuleType

import kubelet
from kubelet.stats import reference
from kubelet.stats.types import CgroupStats

native: ModuleType | None
if kubelet.__impl__ == "native":
    try:
        from kubelet.stats import cgstats
    except ImportError as err:  # never fall back to the slow path silently
        raise ImportError(
            "the Cython stats module kubelet.stats.cgstats is missing; rebuild with "
            "`pip install -e .` (or set KUBELET_IMPL=reference in tests)"
        ) from err
    native = cgstats
    impl: ModuleType = cgstats
else:
    try:
        from kubelet.stats import cgstats as native
    except ImportError:
        native = None
    impl = reference

parse_cgroups = impl.parse_cgroups
read_proc_stat = impl.read_proc_stat
read_meminfo = impl.read_meminfo
read_loadavg = impl.read_loadavg
read_pid_stat = impl.read_pid_stat
fs_usage = impl.fs_usage

__all__ = [
    "CgroupStats",
    "fs_usage",
    "native",
    "parse_cgroups",
    "read_loadavg",
    "read_meminfo",
    "read_pid_stat",
    "read_proc_stat",
    "reference",
]
