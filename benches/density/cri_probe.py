"""The runtime's own List latency: the control for the relist on containerd.

Run as a separate process beside the kubelet in the steady state: every
period it sends the two List calls a relist makes (ListPodSandbox and
ListContainers, together, raw bytes as the PLEG takes them) to the same
runtime and times each pair end to end. It prints the durations (seconds) as
a JSON list. What the kubelet's relist takes beyond this is the kubelet's
own: decoding, the diff, status fetches, and waiting for its event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

from benches.procmetrics import hist_quantile
from kubelet.cri.remote import RemoteRuntimeService


async def probe(endpoint: str, period: float, seconds: float) -> list[float]:
    rt = RemoteRuntimeService(endpoint)
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        await asyncio.gather(rt.list_pod_sandbox_raw(), rt.list_containers_raw())
        took = time.perf_counter() - t0
        out.append(took)
        await asyncio.sleep(max(0.0, period - took))
    return out


def start(endpoint: str, period: float, seconds: float) -> subprocess.Popen[str]:
    """This module as a process, for `seconds` from now."""
    argv = [sys.executable, "-m", __name__, endpoint, "--period", str(period),
            "--seconds", str(seconds)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def finish(
    proc: subprocess.Popen[str], edges: list[float], timeout: float
) -> tuple[float, float, float | None]:
    """p50 and p99 (ms, nearest rank) of the durations, and the p99 read
    through histogram buckets with these upper bounds (seconds), as the
    kubelet's relist metric is read."""
    out, _ = proc.communicate(timeout=timeout)
    took: list[float] = sorted(json.loads(out)) if proc.returncode == 0 and out else []
    if not took:
        raise RuntimeError(f"cri probe failed (exit {proc.returncode})")

    def rank(q: float) -> float:
        return took[min(len(took) - 1, int(q * len(took)))] * 1000

    cumulative = [(le, float(sum(t <= le for t in took))) for le in edges]
    p99 = hist_quantile(cumulative, 0.99)
    return rank(0.5), rank(0.99), None if p99 is None else p99 * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("endpoint")
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(probe(a.endpoint, a.period, a.seconds))))


if __name__ == "__main__":
    main()
