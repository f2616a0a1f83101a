"""cgroup and /proc stats parsers: Cython (kubelet.stats.cgstats, built from
pyx/cgstats.pyx) by default, the pure-Python reference with KUBELET_IMPL=reference.

    parse_cgroups(paths, version, root, fields=) -> list[CgroupStats]   one call per batch
    CgroupReader(version, root, fields, max_fds).read(paths)  the same, descriptors kept
    floor_read(paths, root, fields) -> bytes    the no-parse floor (benchmarks)
    read_proc_stat(), read_meminfo(), read_loadavg(), read_pid_stat(pid), fs_usage(path)
    read_psi(path) -> (some, full) of a pressure file (/proc/pressure/cpu, ...)
"""

from __future__ import annotations

import resource
from types import ModuleType
from typing import TYPE_CHECKING

import kubelet
from kubelet.stats import reference
from kubelet.stats.types import CgroupStats

native: ModuleType | None
if TYPE_CHECKING:
    # Both implementations have the interface cgstats.pyi declares (the
    # equivalence tests hold the reference to it): type the names below by it.
    from kubelet.stats import cgstats as impl
elif kubelet.__impl__ == "native":
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
CgroupReader = impl.CgroupReader
floor_read = impl.floor_read
read_proc_stat = impl.read_proc_stat
read_meminfo = impl.read_meminfo
read_loadavg = impl.read_loadavg
read_pid_stat = impl.read_pid_stat
fs_usage = impl.fs_usage
read_psi = impl.read_psi

# Share of the soft RLIMIT_NOFILE that kept cgroup descriptors may hold; the
# rest is for the API and CRI connections, streaming sessions, logs, inotify.
DESCRIPTOR_SHARE = 0.5


def descriptor_budget(share: float = DESCRIPTOR_SHARE) -> int:
    """How many descriptors the stats readers may keep open: a share of the
    process's soft open-files limit (20,000 on the project's VM: 10,000)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, int(soft * share))


__all__ = [
    "CgroupReader",
    "CgroupStats",
    "descriptor_budget",
    "floor_read",
    "fs_usage",
    "native",
    "parse_cgroups",
    "read_loadavg",
    "read_meminfo",
    "read_pid_stat",
    "read_proc_stat",
    "read_psi",
    "reference",
]
