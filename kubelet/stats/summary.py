"""The pressure (PSI) and swap parts of /stats/summary, as the summary API
v1alpha1 of v1.34 has them (k8s.io/kubelet/pkg/apis/stats/v1alpha1):

- `cpu.psi`, `memory.psi` and `io: {time, psi}` on the node, each pod and each
  container, with the KubeletPSI gate (beta, on): `{full: PSIData, some:
  PSIData}`, PSIData `{total, avg10, avg60, avg300}`. `total` is the kernel's
  cumulative stall time as the pressure file gives it, in microseconds: the API
  comment says nanoseconds, but the Go kubelet v1.34 passes cAdvisor's value
  through unconverted, and consumers compare against it. A line the file lacks
  (cpu's `full` on old kernels) reads as zeros, as there; a cgroup without
  pressure files has no `psi` (and no `io`) at all, where the Go kubelet
  reports zeros on cgroup v1: no made-up figures here.
- `swap: {time, swapUsageBytes, swapAvailableBytes}` on the node, each pod and
  each container. Available is the limit less the usage, left out without a
  limit. The node's figures come from /proc/meminfo (SwapTotal - SwapFree in
  use, SwapFree available), which is what cAdvisor's root cgroup reports.
"""

from __future__ import annotations

from typing import Any, TypedDict

from kubelet.stats.types import PSI, CgroupStats, PSILine


class PSIData(TypedDict):
    total: int
    avg10: float
    avg60: float
    avg300: float


class PSIStats(TypedDict):
    full: PSIData
    some: PSIData


def _data(line: PSILine) -> PSIData:
    if line is None:
        return {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}
    avg10, avg60, avg300, total = line
    return {"total": total, "avg10": avg10, "avg60": avg60, "avg300": avg300}


def psi_stats(p: PSI) -> PSIStats | None:
    if p is None:
        return None
    some, full = p
    return {"full": _data(full), "some": _data(some)}


def add_pressure(out: dict[str, Any], ts: str, cpu: PSI, memory: PSI, io: PSI) -> dict[str, Any]:
    """Adds `psi` to out["cpu"] and out["memory"] (where those blocks exist)
    and an `io` block, for each resource whose pressure is known."""
    for key, p in (("cpu", cpu), ("memory", memory)):
        s = psi_stats(p)
        if s is not None and key in out:
            out[key]["psi"] = s
    s = psi_stats(io)
    if s is not None:
        out["io"] = {"time": ts, "psi": s}
    return out


def cgroup_pressure(out: dict[str, Any], ts: str, st: CgroupStats) -> dict[str, Any]:
    return add_pressure(out, ts, st.cpu_pressure, st.memory_pressure, st.io_pressure)


def swap_stats(ts: str, usage: int | None, limit: int | None) -> dict[str, Any] | None:
    """SwapStats, or None when neither figure is known."""
    if usage is None and limit is None:
        return None
    out: dict[str, Any] = {"time": ts}
    if limit is not None and usage is not None:
        out["swapAvailableBytes"] = max(0, limit - usage)
    if usage is not None:
        out["swapUsageBytes"] = usage
    return out


def cgroup_swap(out: dict[str, Any], ts: str, st: CgroupStats) -> dict[str, Any]:
    s = swap_stats(ts, st.swap_usage, st.swap_limit)
    if s is not None:
        out["swap"] = s
    return out


def node_swap(ts: str, meminfo: dict[str, int | None] | None) -> dict[str, Any] | None:
    if meminfo is None:
        return None
    total, free = meminfo.get("SwapTotal"), meminfo.get("SwapFree")
    if total is None or free is None:
        return None
    return {"time": ts, "swapAvailableBytes": free, "swapUsageBytes": max(0, total - free)}
