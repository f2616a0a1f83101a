"""Tasks on the node (pkg/kubelet/stats/pidlimit upstream): the kernel's
ceiling on tasks and how many there are now. The summary's node.rlimit and
the pid.available eviction signal both come from here, so they agree."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet.stats import read_loadavg


@dataclass(frozen=True)
class Tasks:
    # min(kernel.pid_max, kernel.threads-max): both cap the tasks (threads too)
    max: int
    # every task there is: /proc/loadavg's fourth field after the slash
    # (sysinfo's count is truncated past 65,536, upstream issue 107107)
    running: int


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def tasks(proc: str = "/proc") -> Tasks | None:
    """None when no limit, or not the load average, can be read."""
    files = (f"{proc}/sys/kernel/pid_max", f"{proc}/sys/kernel/threads-max")
    limits = [v for v in map(_read_int, files) if v is not None]
    load = read_loadavg(f"{proc}/loadavg")
    if not limits or load is None:
        return None
    return Tasks(min(limits), int(load[4]))


def rlimit(ts: str, proc: str = "/proc") -> dict[str, object] | None:
    """The summary's node.rlimit (RlimitStats)."""
    t = tasks(proc)
    if t is None:
        return None
    return {"time": ts, "maxpid": t.max, "curproc": t.running}
