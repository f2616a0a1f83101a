"""The node's task ceiling and count, as upstream's pidlimit reads them: the
summary's node.rlimit and the pid.available signal come from the same read."""

from __future__ import annotations

from pathlib import Path

from kubelet.eviction.signals import Observation, pid_observation
from kubelet.stats import pidlimit


def proc(tmp: Path, pid_max: str | None, threads_max: str | None, loadavg: str) -> str:
    (tmp / "sys/kernel").mkdir(parents=True)
    if pid_max is not None:
        (tmp / "sys/kernel/pid_max").write_text(pid_max)
    if threads_max is not None:
        (tmp / "sys/kernel/threads-max").write_text(threads_max)
    (tmp / "loadavg").write_text(loadavg)
    return str(tmp)


def test_rlimit_is_the_lower_limit_and_every_task(tmp_path: Path) -> None:
    root = proc(tmp_path, "4194304\n", "95000\n", "1.36 3.49 4.53 2/3518 3715089\n")
    assert pidlimit.rlimit("T", root) == {"time": "T", "maxpid": 95000, "curproc": 3518}
    # The eviction signal is the same read: available = maxpid - curproc.
    assert pid_observation(root, []) == Observation(95000 - 3518, 95000)


def test_rlimit_without_limits_or_load_is_left_out(tmp_path: Path) -> None:
    assert pidlimit.rlimit("T", proc(tmp_path / "a", None, None, "0 0 0 1/5 9\n")) is None
    assert pidlimit.rlimit("T", proc(tmp_path / "b", "32768\n", None, "garbage\n")) is None


def test_rlimit_on_this_machine() -> None:
    got = pidlimit.rlimit("T")
    assert got is not None
    limits = []
    for f in ("pid_max", "threads-max"):
        limits.append(int(Path(f"/proc/sys/kernel/{f}").read_text()))
    assert got["maxpid"] == min(limits)
    assert isinstance(got["curproc"], int) and got["curproc"] > 0
