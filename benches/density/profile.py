"""py-spy on our kubelet during a density run (--profile): started on its pid,
read back from the collapsed stacks it writes into the run's directory."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

Frames = list[tuple[str, float]]  # (frame, share of samples)


def start(run_dir: Path, pid: int, name: str, duration: float) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        print("py-spy not installed (pip install py-spy): no profile", file=sys.stderr)
        return None
    out = run_dir / f"{name}.txt"
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--duration", str(int(duration)),
         "--rate", "200", "--format", "raw", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=open(run_dir / f"py-spy-{name}.log", "wb"),
    )  # fmt: skip


def finish(
    run_dir: Path, spy: subprocess.Popen[bytes], name: str = "profile", stop: bool = False
) -> tuple[Frames, Frames]:
    """Self time per leaf frame (top 15), and inclusive time per frame in the
    kubelet package (top 25)."""
    if stop and spy.poll() is None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()
    return shares(run_dir / f"{name}.txt")


def shares(raw: Path) -> tuple[Frames, Frames]:
    """finish()'s two lists from a raw py-spy profile."""
    counts: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    try:
        for line in open(raw):
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            counts[frames[-1]] = counts.get(frames[-1], 0) + int(n)
            for fr in set(frames):
                if "kubelet/" in fr and "/site-packages/" not in fr:
                    incl[fr] = incl.get(fr, 0) + int(n)
            total += int(n)
    except (OSError, ValueError):
        return [], []
    share = max(total, 1)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:15]
    itop = sorted(incl.items(), key=lambda kv: -kv[1])[:25]
    return (
        [(k, round(v / share, 4)) for k, v in top],
        [(k, round(v / share, 4)) for k, v in itop],
    )
