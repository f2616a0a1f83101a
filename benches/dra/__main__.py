"""python -m benches.dra [--kubelet ours|upstream|both] [--focus RE] [--skip RE] [--out DIR]

Runs the upstream DRA e2e suite (test/e2e/dra of the pinned k8s.io/kubernetes,
built as e2e-dra.test) on a one-node cluster of the conformance harness
(API server, controller-manager with the resource claim controller,
scheduler, a private containerd 2) whose kubelet is ours, the upstream
v1.34.4 one, or each in turn (upstream first). The suite's test driver runs
in the e2e process and reaches the kubelet through its proxy pod (see
benches/dra/harness.py). Records OUT/<kubelet>/results.json and results.md in
the conformance record format (default OUT: docs/dra), with the JUnit report
and logs. Builds what is missing first. Exits 1 when a run failed or ours
failed a spec upstream passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benches import records
from benches.conformance import harness
from benches.conformance.__main__ import run_kubelets
from benches.dra.harness import PROXY_REF, SUITE, DRARun, proxy_image
from kubelet.testing import images

REPO = harness.REPO
FOCUS = r"\[DRA\]"
# One node here: what needs two is left out, and what needs a gate that is
# off by default (alpha) in v1.34 on the API server or the kubelet.
SKIP = r"\[Alpha\]|\[Serial\]|\[Disruptive\]|\[Slow\]|multiple nodes|\[Feature:(DRA[A-Za-z]+|Alpha)"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def build(kubelets: list[str]) -> None:
    harness.build(kubelets, SUITE)
    if subprocess.run(
        ["bash", str(REPO / "hack/parts/csi.sh")], stdout=subprocess.DEVNULL
    ).returncode:
        raise harness.RunFailed("hack/parts/csi.sh failed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.dra", description=__doc__)
    ap.add_argument("--kubelet", choices=["ours", "upstream", "both"], default="both")
    ap.add_argument("--focus", default=FOCUS, help="ginkgo --focus regex")
    ap.add_argument("--skip", default=SKIP, help="ginkgo --skip regex")
    ap.add_argument("--out", default=str(REPO / "docs" / "dra"))
    ap.add_argument("--procs", type=int, default=2, help="ginkgo parallel processes")
    ap.add_argument("--timeout", type=float, default=60, help="minutes for the whole suite")
    ap.add_argument("--workdir", default="", help="cluster state (default: a fresh /tmp dir)")
    ap.set_defaults(suite=SUITE)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("the DRA harness runs containerd and kubelets: run it as root", file=sys.stderr)
        return 2
    started = records.begin(argv, "benches.dra")
    kubelets = ["upstream", "ours"] if args.kubelet == "both" else [args.kubelet]
    out = Path(args.out)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kpy-dra-", dir="/tmp"))
    try:
        build(kubelets)
        image_tars = images.build_e2e(
            str(workdir / "images"), str(harness.BIN), harness.k8s_source()
        )
        image_tars[PROXY_REF] = proxy_image(str(workdir / "images"))
    except harness.RunFailed as err:
        print(f"dra: {err}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = {"focus": args.focus, "skip": args.skip, "results": str(out)}
    status = run_kubelets(kubelets, args, out, workdir, image_tars, summary, DRARun)
    records.write(started, "dra-e2e", summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
