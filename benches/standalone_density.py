"""Standalone node under load: N static pods on the simulated runtime, the real
`kubelet` command, native vs reference kernels in one run.

    python -m benches.standalone_density [--pods 200 2000] [--relist 0.1] [--hold 30]

Reports time to all Running, relist duration p50/p99 (from the kubelet's own
histogram, interpolated within buckets), and the kubelet's CPU (cores) and RSS
during the steady state, read from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benches import records
from benches.procmetrics import buckets, hist_quantile, proc_cpu_s, proc_rss_mib
from kubelet.testing.kubelets import KubeletProcess, sleeper_pod, write_manifest
from kubelet.testing.simruntime import start_simruntime

DEMO_CONFIG = Path(__file__).parent.parent / "hack/demo/kubelet-config.yaml"
RELIST_HIST = "kubelet_pleg_relist_duration_seconds"
START_HIST = "kubelet_pod_start_duration_seconds"


def rounded(v: float | None, scale: float = 1.0, digits: int = 3) -> float | None:
    return None if v is None else round(v * scale, digits)


def run(n: int, impl: str, relist: float, hold: float, runtime: str = "sim") -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix=f"density-{n}-{impl}-"))
    manifests = tmp / "m"
    manifests.mkdir()
    for i in range(n):
        write_manifest(manifests, sleeper_pod(f"p{i:05d}"), ".json")
    ctd = None
    sim = None
    if runtime == "containerd":
        from kubelet.testing.containerd import Containerd

        ctd = Containerd(str(tmp / "ctd"), subnet="10.244.9.0/24", bridge="kpy2").start()
        endpoint = ctd.endpoint
    else:
        sim = start_simruntime(tmp)
        endpoint = sim.endpoint
    k = KubeletProcess(
        tmp, endpoint, "density", config_file=DEMO_CONFIG, manifests=manifests,
        flags=("--pleg-relist-period", f"{int(relist * 1000)}ms", "--max-pods", str(n + 10)),
        pod_logs_dir=tmp / "logs", env=dict(os.environ, KUBELET_IMPL=impl),
    )  # fmt: skip
    ro = k.read_only_port
    t0 = time.monotonic()
    k.start()
    try:
        running = 0
        while time.monotonic() - t0 < 600:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ro}/pods", timeout=10) as r:
                    items = json.load(r)["items"]
                running = sum(p.get("status", {}).get("phase") == "Running" for p in items)
            except OSError:
                pass
            if running == n:
                break
            time.sleep(0.5)
        all_running = time.monotonic() - t0
        time.sleep(5)  # let start-up work settle
        with urllib.request.urlopen(f"http://127.0.0.1:{ro}/metrics", timeout=10) as r:
            before = buckets(r.read().decode(), RELIST_HIST)
        c0, w0 = proc_cpu_s(k.proc.pid), time.monotonic()
        time.sleep(hold)
        cpu = (proc_cpu_s(k.proc.pid) - c0) / (time.monotonic() - w0)
        rss = proc_rss_mib(k.proc.pid)
        with urllib.request.urlopen(f"http://127.0.0.1:{ro}/metrics", timeout=10) as r:
            after = buckets(r.read().decode(), RELIST_HIST)
        steady = [(le, c - b) for (le, c), (_, b) in zip(after, before, strict=True)]
        with urllib.request.urlopen(f"http://127.0.0.1:{ro}/metrics", timeout=10) as r:
            starts = buckets(r.read().decode(), START_HIST)
        return {
            "pods": n,
            "impl": impl,
            "runtime": runtime,
            "pod_start_p50_s": rounded(hist_quantile(starts, 0.5), digits=2),
            "pod_start_p99_s": rounded(hist_quantile(starts, 0.99), digits=2),
            "relist_period_s": relist,
            "running": running,
            "all_running_s": round(all_running, 2),
            "relist_p50_ms": rounded(hist_quantile(steady, 0.5), 1000),
            "relist_p99_ms": rounded(hist_quantile(steady, 0.99), 1000),
            "relists": steady[-1][1] if steady else 0,
            "cpu_cores": round(cpu, 3),
            "rss_mib": round(rss, 1),
        }
    finally:
        k.stop()
        if sim is not None:
            sim.stop()
        if ctd is not None:
            ctd.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.standalone_density")
    ap.add_argument("--pods", type=int, nargs="+", default=[200, 2000])
    ap.add_argument("--relist", type=float, default=0.1)
    ap.add_argument("--hold", type=float, default=30.0)
    ap.add_argument("--impl", nargs="+", default=["native", "reference"])
    ap.add_argument("--runtime", choices=["sim", "containerd"], default="sim")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    started = records.begin(argv, "benches.standalone_density")
    results = []
    for n in args.pods:
        for impl in args.impl:
            r = run(n, impl, args.relist, args.hold, args.runtime)
            print(json.dumps(r), flush=True)
            results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    records.write(started, f"standalone-{args.runtime}", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
