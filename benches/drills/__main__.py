"""Long versions of the fault drills.

    python -m benches.drills kill9 [--runtime sim|containerd] [--pods 1000]
    python -m benches.drills runtime-empty [--pods 1000]

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

from benches.drills import Report, kill9, runtime_restarted_empty
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from tests.fixtures.simruntime import SimRuntimeProc, start_simruntime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.drills")
    ap.add_argument("drill", choices=["kill9", "runtime-empty"])
    ap.add_argument("--runtime", choices=["sim", "containerd"], default="sim")
    ap.add_argument("--pods", type=int, default=None, help="default: 1000 sim, 100 containerd")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for pods to run")
    args = ap.parse_args(argv)
    n = args.pods or (1000 if args.runtime == "sim" else 100)
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
        if args.drill == "kill9":
            r = kill9(cp, work / "node", endpoint, f"drill-{args.runtime}", n, args.timeout)
        else:
            if ctd is not None:
                ap.error("runtime-empty runs on the simulated runtime")

            def restart() -> None:
                sims[-1].stop()
                (work / "sim.sock").unlink(missing_ok=True)
                sims.append(start_simruntime(work))

            r = runtime_restarted_empty(
                cp, work / "node", endpoint, restart, "drill-sim-empty", n, args.timeout
            )
        r.figures["drill_s"] = round(time.monotonic() - t0, 1)
    finally:
        for s in sims:
            s.stop()
        if ctd is not None:
            ctd.stop()
        cp.stop()
    print(json.dumps(asdict(r), indent=1))
    return 1 if r.problems else 0


if __name__ == "__main__":
    sys.exit(main())
