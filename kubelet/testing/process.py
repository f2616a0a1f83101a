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


def unmount_under(root: Path, dry_run: bool = False) -> int:
    """Lazily unmount whatever a kubelet left mounted at or below `root` (upstream
    bind-mounts its root dir onto itself and puts secret and projected volumes
    on tmpfs), deepest first. Returns the count (with dry_run: of the mounts
    there, none unmounted)."""
    top = str(root.resolve())
    prefix = top + "/"
    points = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                mp = line.split()[4].replace("\\040", " ")
                if mp == top or mp.startswith(prefix):
                    points.append(mp)
    except OSError:
        return 0
    if dry_run:
        return len(points)
    for mp in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True)
    return len(points)


def remove_unless_mounted(tree: Path, scope: Path | None = None) -> bool:
    """Remove `tree`, unless anything is mounted at or under `scope` (default:
    the tree itself): a tree walk must never reach into a mount. False then,
    and nothing is removed."""
    if unmount_under(scope or tree, dry_run=True):
        return False
    shutil.rmtree(tree, ignore_errors=True)
    return True
