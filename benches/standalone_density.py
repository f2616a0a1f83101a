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
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benches import records
from benches.procmetrics import buckets, free_port, hist_quantile, proc_cpu_s, proc_rss_mib

RELIST_HIST = "kubelet_pleg_relist_duration_seconds"
START_HIST = "kubelet_pod_start_duration_seconds"


def rounded(v: float | None, scale: float = 1.0, digits: int = 3) -> float | None:
    return None if v is None else round(v * scale, digits)


def run(n: int, impl: str, relist: float, hold: float, runtime: str = "sim") -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix=f"density-{n}-{impl}-"))
    sock = tmp / "sim.sock"
    manifests = tmp / "m"
    manifests.mkdir()
    for i in range(n):
        (manifests / f"p{i:05d}.json").write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i:05d}"},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "busybox:1.36", "command": ["sleep", "infinity"]}
                        ]
                    },
                }
            )
        )
    ctd = None
    sim = None
    if runtime == "containerd":
        from kubelet.testing.containerd import Containerd

        ctd = Containerd(str(tmp / "ctd"), subnet="10.244.9.0/24", bridge="kpy2").start()
        sock = Path(ctd.socket)
    else:
        sim = subprocess.Popen([sys.executable, "-m", "kubelet.simruntime", "--listen", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while not sock.exists():
            time.sleep(0.05)
    ro = free_port()
    env = dict(os.environ, KUBELET_IMPL=impl)
    argv = [
        sys.executable, "-m", "kubelet", "--config", str(Path(__file__).parent.parent / "hack/demo/kubelet-config.yaml"),
        "--pleg-relist-period", f"{int(relist * 1000)}ms", "--max-pods", str(n + 10),
        "--port", str(free_port()), "--read-only-port", str(ro), "--healthz-port", str(free_port()),
        "--container-runtime-endpoint", f"unix://{sock}", "--pod-manifest-path", str(manifests),
        "--root-dir", str(tmp / "root"), "--cert-dir", str(tmp / "pki"), "--pod-logs-dir", str(tmp / "logs"),
        "--hostname-override", "density",
    ]  # fmt: skip
    t0 = time.monotonic()
    k = subprocess.Popen(
        argv, env=env, stdout=open(tmp / "kubelet.log", "wb"), stderr=subprocess.STDOUT
    )
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
        c0, w0 = proc_cpu_s(k.pid), time.monotonic()
        time.sleep(hold)
        cpu = (proc_cpu_s(k.pid) - c0) / (time.monotonic() - w0)
        rss = proc_rss_mib(k.pid)
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
        k.terminate()
        k.wait(30)
        if sim is not None:
            sim.terminate()
            sim.wait(30)
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
