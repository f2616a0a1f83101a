"""Processes that tests and benchmarks start: where to put a socket, how to
stop one, and how to clean up the mounts a stopped kubelet leaves."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def short_dir(prefix: str) -> Path:
    """A new directory under $TMPDIR with a short path: a unix socket's path is
    limited to 107 bytes, and pytest's tmp_path is often longer."""
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    return d


def stop_process(
    proc: subprocess.Popen[bytes], timeout: float = 10, sig: int = signal.SIGTERM
) -> int:
    """`sig` to a process still running, SIGKILL if it has not exited after
    `timeout` s; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def mounts_under(root: Path) -> list[str]:
    """The mount points at or below `root`, as /proc/self/mountinfo names them
    (octal-escaped spaces decoded); empty when mountinfo cannot be read."""
    top = str(root.resolve())
    prefix = top + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            points = [line.split()[4].replace("\\040", " ") for line in fh]
    except OSError:
        return []
    return [mp for mp in points if mp == top or mp.startswith(prefix)]


def unmount_under(root: Path) -> int:
    """Lazily unmount whatever a kubelet left mounted at or below `root` (upstream
    bind-mounts its root dir onto itself and puts secret and projected volumes
    on tmpfs), deepest first. Returns how many there were."""
    points = mounts_under(root)
    for mp in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True)
    return len(points)


# Where a kubelet links each container's log for log shippers (upstream's
# legacy links; no flag moves them).
LEGACY_LOG_LINKS = "/var/log/containers"


def remove_log_links_into(tree: Path, links_dir: str = LEGACY_LOG_LINKS) -> int:
    """Remove the legacy log links that point into `tree`: a test kubelet stopped
    before its garbage collector removed its containers leaves one per
    container in the host's dir, and every later kubelet scans them all each
    GC pass. Returns how many were removed."""
    tops = {os.path.abspath(tree) + "/", str(tree.resolve()) + "/"}
    try:
        names = os.listdir(links_dir)
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = os.path.join(links_dir, name)
        try:
            if os.readlink(path).startswith(tuple(tops)):
                os.unlink(path)
                removed += 1
        except OSError:  # not a link, or gone meanwhile
            continue
    return removed


def remove_unless_mounted(tree: Path, scope: Path | None = None) -> bool:
    """Remove `tree`, unless anything is mounted at or under `scope` (default:
    the tree itself): a tree walk must never reach into a mount. False then,
    and nothing is removed."""
    if mounts_under(scope or tree):
        return False
    shutil.rmtree(tree, ignore_errors=True)
    return True
