"""python -m benches.node_e2e [--kubelet ours|upstream|both] [--focus RE] [--skip RE]
                             [--label-filter EXPR] [--serial] [--out DIR]

Runs the node e2e suite of k8s.io/kubernetes v1.34.4 (test/e2e_node, built as
e2e_node.test) against our kubelet, the upstream one, or each in turn (upstream
first), on this machine: the suite's own API server and etcd, a private
containerd, the test images built locally, and systemd stand-ins through which
the suite starts and restarts the kubelet.

By default the non-serial [NodeConformance] specs run, 4 at a time. --serial
runs the chosen specs one at a time, for the [Serial] feature suites, e.g.
    --serial --focus 'Eviction' --skip '\\[Flaky\\]'

Writes OUT/<kubelet>/results.json and results.md (default OUT: docs/node-e2e),
and the JUnit report and logs to ARTIFACTS/<kubelet>/; with --record NAME also
the record benches/results/node-e2e-NAME-<time>.json of every kubelet's results. Our run is compared with
OUT/upstream/results.json when it exists. Exits 1 when a run failed (the suite
did not complete) or one of our specs failed where upstream passed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from benches import records
from benches.conformance.harness import RunFailed
from benches.node_e2e import harness, results
from kubelet.testing.process import remove_unless_mounted

# The page whose results block each run rewrites (from docs/node-e2e/**/results.json).
DOC = harness.REPO / "docs" / "node-e2e.md"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benches.node_e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--kubelet", choices=["ours", "upstream", "both"], default="both")
    ap.add_argument("--focus", default=harness.NODE_CONFORMANCE_FOCUS, help="ginkgo --focus regex")
    ap.add_argument("--skip", default=None, help=f"ginkgo --skip regex ({harness.DEFAULT_SKIP})")
    ap.add_argument("--label-filter", default="", help="ginkgo --label-filter expression")
    ap.add_argument("--serial", action="store_true", help="one spec at a time, [Serial] included")
    ap.add_argument("--procs", type=int, default=4, help="ginkgo processes (1 with --serial)")
    ap.add_argument("--timeout", type=float, default=120, help="minutes for the whole suite")
    ap.add_argument("--out", default="docs/node-e2e", help="results go to OUT/<kubelet>/")
    ap.add_argument(
        "--artifacts", default="out/node-e2e", help="JUnit and logs: ARTIFACTS/<kubelet>/"
    )
    ap.add_argument("--workdir", default="", help="run state (default: a fresh /tmp dir)")
    ap.add_argument(
        "--record",
        default="",
        metavar="NAME",
        help="also write the results as the record benches/results/node-e2e-NAME-<time>.json",
    )
    ap.add_argument(
        "--kubelet-flags",
        default="",
        help="extra kubelet flags for both kubelets (space-separated)",
    )
    ap.add_argument(
        "--feature-gates",
        default="",
        help="the suite's --feature-gates (A=true,B=false): its kubelet config gets them",
    )
    ap.add_argument(
        "--service-feature-gates",
        default="",
        help="the suite's --service-feature-gates: its in-process API server's gates",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = records.begin(argv, "benches.node_e2e")
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("the node e2e harness runs containerd and kubelets: run it as root", file=sys.stderr)
        return 2
    skip = args.skip
    if skip is None:
        skip = r"\[Flaky\]" if args.serial else harness.DEFAULT_SKIP
    kubelets = ["upstream", "ours"] if args.kubelet == "both" else [args.kubelet]
    out, artifacts = Path(args.out), Path(args.artifacts)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kpy-node-e2e-"))
    try:
        harness.build(kubelets)
        image_set = harness.build_images(workdir / "images")
    except (RunFailed, OSError, RuntimeError) as err:
        print(f"node e2e: {err}", file=sys.stderr)
        return 1
    status = 0
    figures: dict[str, object] = {}
    upstream = results.load(out / "upstream" / "results.json")
    for kubelet in kubelets:
        opts = harness.Options(
            kubelet=kubelet,
            workdir=workdir,
            focus=args.focus,
            skip=skip,
            label_filter=args.label_filter,
            procs=1 if args.serial else args.procs,
            timeout_s=args.timeout * 60,
            kubelet_flags=args.kubelet_flags.split(),
            feature_gates=args.feature_gates,
            service_feature_gates=args.service_feature_gates,
        )
        run = harness.run_one(opts, image_set)
        results.annotate(run, upstream if kubelet == "ours" else None)
        results.write(run, out / kubelet)
        figures[kubelet] = json.loads((out / kubelet / "results.json").read_text())
        harness.copy_artifacts(workdir / kubelet, artifacts / kubelet)
        if kubelet == "upstream" and not run.error:
            upstream = run
        print(f"{kubelet}: {results.summary(run)} in {run.duration_s / 60:.1f} min")
        if kubelet == "ours" and upstream is not None:
            ok, base = results.passed_where_upstream_passes(run)
            print(f"ours: passed where upstream passes: {ok} of {base}")
            status |= ok < base
        if run.error:
            print(f"{kubelet}: RUN FAILED: {run.error}", file=sys.stderr)
            status = 1
    results.update_doc(DOC, DOC.parent / "node-e2e")
    if args.record:
        records.write(started, f"node-e2e-{args.record}", figures)
    if status == 0 and not args.workdir:
        _remove_workdir(workdir)
    return status


def _remove_workdir(workdir: Path) -> None:
    """A run that passed leaves nothing in /tmp (its artefacts are copied out;
    its images are built again from cached parts); a failed one keeps its
    state to look at. Nothing is removed while anything under it is still
    mounted."""
    if not remove_unless_mounted(workdir):
        print(f"node e2e: {workdir} kept: something is still mounted under it", file=sys.stderr)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("node e2e: interrupted (every process of the run was stopped)", file=sys.stderr)
        sys.exit(130)
