"""Processes that tests and benchmarks start: where to put a socket, and how
to stop one."""

from __future__ import annotations

import os
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
