"""--lock-file / --exit-on-lock-contention between two real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from kubelet.util import flock

    async def main(path):
        flock.acquire(path)
        stop = asyncio.Event()
        if sys.argv[2] == "watch":
            flock.watch_for_contention(path, asyncio.get_running_loop(), stop.set)
        print("locked", flush=True)
        await asyncio.wait_for(stop.wait(), 60)
        print("contended", flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)

TAKER = textwrap.dedent(
    """
    import sys
    from kubelet.util import flock
    flock.acquire(sys.argv[1])
    print("acquired", flush=True)
    """
)


def test_second_kubelet_takes_the_lock_from_the_first(tmp_path: Path) -> None:
    lock = str(tmp_path / "run" / "kubelet.lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock, "watch"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        taker = subprocess.Popen(
            [sys.executable, "-c", TAKER, lock], stdout=subprocess.PIPE, text=True
        )
        out, _ = taker.communicate(timeout=60)
        # The holder saw the open, stopped, and released the lock by exiting.
        assert holder.wait(timeout=60) == 0
        assert holder.stdout.read().strip() == "contended"
        assert out.strip() == "acquired"
    finally:
        holder.kill()


def test_lock_is_exclusive_while_held(tmp_path: Path) -> None:
    lock = str(tmp_path / "kubelet.lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock, "nowatch"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR)\n"
                "try:\n fcntl.flock(fd, fcntl.LOCK_EX|fcntl.LOCK_NB); print('free')\n"
                "except BlockingIOError: print('held')",
                lock,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert probe.stdout.strip() == "held"
    finally:
        holder.kill()
        holder.wait()
