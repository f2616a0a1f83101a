"""python -m benches.storage [--kubelet ours|upstream|both] [--focus RE] [--skip RE] [--out DIR]

Runs the upstream storage test suites (test/e2e/storage/testsuites of the
pinned k8s.io/kubernetes, through test/e2e/storage/external with
benches/storage/driver.yaml) against the project's csi-hostpath driver on a
one-node cluster whose kubelet is ours, the upstream v1.34.4 one, or each in
turn (upstream first). Records OUT/<kubelet>/results.json and results.md in
the conformance record format (default OUT: docs/storage), with the JUnit
report and logs. Builds what is missing first: the conformance parts,
e2e-storage.test (hack/parts/csi/build-e2e.sh) and the CSI parts (hack/parts/csi.sh).
Exits 1 when a run failed or ours failed a spec upstream passed.
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
from benches.storage.harness import FOCUS, SKIP, StorageRun
from kubelet.testing import images

REPO = harness.REPO


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def build(kubelets: list[str]) -> None:
    harness.build(kubelets)
    for script in ("hack/parts/csi/build-e2e.sh", "hack/parts/csi.sh"):
        if subprocess.run(["bash", str(REPO / script)], stdout=subprocess.DEVNULL).returncode:
            raise harness.RunFailed(f"{script} failed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.storage", description=__doc__)
    ap.add_argument("--kubelet", choices=["ours", "upstream", "both"], default="both")
    ap.add_argument("--focus", default=FOCUS, help="ginkgo --focus regex")
    ap.add_argument("--skip", default=SKIP, help="ginkgo --skip regex")
    ap.add_argument("--out", default=str(REPO / "docs" / "storage"))
    ap.add_argument("--procs", type=int, default=4, help="ginkgo parallel processes")
    ap.add_argument("--timeout", type=float, default=150, help="minutes for the whole suite")
    ap.add_argument("--workdir", default="", help="cluster state (default: a fresh /tmp dir)")
    # StorageRun always runs e2e-storage.test; run_kubelets reads the choice.
    ap.set_defaults(suite="e2e-storage.test")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("the storage harness runs containerd and kubelets: run it as root", file=sys.stderr)
        return 2
    started = records.begin(argv, "benches.storage")
    kubelets = ["upstream", "ours"] if args.kubelet == "both" else [args.kubelet]
    out = Path(args.out)
    # Short: the driver's sockets live under each kubelet's root dir.
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kpy-st-", dir="/tmp"))
    try:
        build(kubelets)
        image_tars = images.build_storage(
            str(workdir / "images"),
            str(harness.BIN),
            harness.k8s_source(),
            str(harness.CACHE / "debs"),
        )
    except harness.RunFailed as err:
        print(f"storage: {err}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = {"focus": args.focus, "skip": args.skip, "results": str(out)}
    status = run_kubelets(kubelets, args, out, workdir, image_tars, summary, StorageRun)
    records.write(started, "storage-suites", summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
