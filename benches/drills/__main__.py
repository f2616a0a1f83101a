"""Long versions of the fault drills.

    python -m benches.drills kill9 [--runtime sim|containerd] [--pods 1000]
    python -m benches.drills runtime-empty [--pods 1000]
    python -m benches.drills api-outage [--pods 1000] [--down 60]
    python -m benches.drills runtime-stopped --runtime containerd [--pods 100] [--down 60]
    python -m benches.drills corrupt-state | disk-full

Each starts its own control plane (with controllers) and runtime, runs the drill
and prints its report as JSON; exit 1 when the report lists problems.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benches import records
from benches.drills import (
    Report,
    api_outage,
    corrupt_state,
    disk_full,
    kill9,
    runtime_restarted_empty,
    runtime_stopped,
)
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from tests.fixtures.simruntime import SimRuntimeProc, start_simruntime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.drills")
    ap.add_argument(
        "drill",
        choices=["kill9", "runtime-empty", "api-outage", "runtime-stopped", "corrupt-state",
                 "disk-full"],
    )  # fmt: skip
    ap.add_argument("--down", type=float, default=60.0, help="outage seconds")
    ap.add_argument("--runtime", choices=["sim", "containerd"], default="sim")
    ap.add_argument("--pods", type=int, default=None, help="default: 1000 sim, 100 containerd")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for pods to run")
    args = ap.parse_args(argv)
    n = args.pods or (1000 if args.runtime == "sim" else 100)
    started = records.begin(argv, "benches.drills")
    work = Path(tempfile.mkdtemp(prefix="drill-"))
    print(f"work dir {work}", flush=True)
    cp = ControlPlane(str(work / "cp"), controllers=True).start()
    sims: list[SimRuntimeProc] = []
    ctd: Containerd | None = None
    try:
        if args.runtime == "containerd":
            ctd = Containerd(str(work / "ctd"), subnet="10.244.9.0/24", bridge="kpyd0").start()
            endpoint = ctd.endpoint
        else:
            sims.append(start_simruntime(work))
            endpoint = sims[0].endpoint
        t0 = time.monotonic()
        r: Report
        node = work / "node"
        if args.drill == "kill9":
            r = kill9(cp, node, endpoint, f"drill-{args.runtime}", n, args.timeout)
        elif args.drill == "api-outage":
            r = api_outage(cp, node, endpoint, "drill-api-out", n, args.down, timeout=args.timeout)
        elif args.drill == "corrupt-state":
            r = corrupt_state(cp, node, endpoint, "drill-corrupt", n)
        elif args.drill == "disk-full":
            r = disk_full(cp, node, endpoint, "drill-disk-full")
        elif args.drill == "runtime-stopped":
            if ctd is None:
                ap.error("runtime-stopped needs --runtime containerd")
            r = runtime_stopped(cp, node, ctd, "drill-ctd-down", n, args.down)
        else:
            if ctd is not None:
                ap.error("runtime-empty runs on the simulated runtime")

            def restart() -> None:
                sims[-1].stop()
                (work / "sim.sock").unlink(missing_ok=True)
                sims.append(start_simruntime(work))

            r = runtime_restarted_empty(
                cp, node, endpoint, restart, "drill-sim-empty", n, args.timeout
            )
        r.figures["drill_s"] = round(time.monotonic() - t0, 1)
    finally:
        for s in sims:
            s.stop()
        if ctd is not None:
            ctd.stop()
        cp.stop()
    print(json.dumps(asdict(r), indent=1))
    figures = {"runtime": args.runtime, "down_s": args.down, **asdict(r)}
    records.write(started, f"drill-{args.drill}-{args.runtime}", figures)
    return 1 if r.problems else 0


if __name__ == "__main__":
    sys.exit(main())
