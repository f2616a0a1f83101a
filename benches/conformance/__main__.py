"""python -m benches.conformance [--kubelet ours|upstream|both] [--focus RE] [--skip RE] [--out DIR]
                                [--suite e2e.test|e2e-storage.test]

Runs the node conformance tests of k8s.io/kubernetes (the [Conformance] specs of
test/e2e/common/node and test/e2e/common/storage) against a one-node cluster
whose kubelet is ours, the upstream v1.34.4 one, or each in turn. Writes
OUT/<kubelet>/results.json and results.md (plus the JUnit report and the logs
of the run). Our results are compared with OUT/upstream/results.json when it
exists: our figure is "passed where upstream passes". Exits 1 when a run
failed (a kubelet crashed, the suite timed out) or one of our tests failed
where upstream passed. --suite e2e-storage.test runs test/e2e/storage instead
(the in-tree drivers' subPath suites, the atomic-writer volumes' subPaths)
on the same cluster; give it a --focus.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from benches import records
from benches.conformance import harness, results


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def annotate(run: results.RunResult, upstream: results.RunResult | None) -> None:
    failed = [t for t in run.tests if t.state in (results.FAILED, results.TIMEDOUT)]
    if run.kubelet == "ours":
        if upstream is not None:
            results.merge_upstream(run, upstream)
        for t in failed:
            t.cause = results.classify(t)
    else:
        for t in failed:
            t.cause = results.machine_cause(t)


def rewrite(out: Path) -> int:
    upstream = None
    for kubelet in ("upstream", "ours"):
        run = results.load(out / kubelet / "results.json")
        junit = out / kubelet / "junit.xml"
        if run is None or not junit.exists():
            continue
        run.tests = results.parse_junit(junit)
        annotate(run, upstream)
        results.write(run, out / kubelet)
        if kubelet == "upstream":
            upstream = run
        print(f"rewrote {out / kubelet / 'results.md'}")
    return 0


def run_kubelets(
    kubelets: list[str],
    args: argparse.Namespace,
    out: Path,
    workdir: Path,
    image_tars: dict[str, str],
    summary: dict[str, Any],
    run_class: type[harness.Run] = harness.Run,
) -> int:
    """Each kubelet's run in turn (upstream first, the control), recorded in
    OUT/<kubelet>/ and its counts in `summary`; 1 when a run failed or ours
    failed where upstream passed."""
    status = 0
    upstream = results.load(out / "upstream" / "results.json")
    for kubelet in kubelets:
        opts = harness.Options(
            kubelet=kubelet,
            workdir=workdir,
            focus=args.focus,
            skip=args.skip,
            procs=args.procs,
            timeout_s=args.timeout * 60,
            suite=args.suite,
        )
        run = harness.run_one(opts, image_tars, run_class)
        annotate(run, upstream)
        results.write(run, out / kubelet)
        harness.copy_artifacts(workdir / kubelet, out / kubelet)
        if kubelet == "upstream" and not run.error:
            upstream = run
        c = run.counts()
        summary[kubelet] = {"counts": c, "duration_s": run.duration_s, "error": run.error}
        print(
            f"{kubelet}: {c['passed']} passed, {c['failed']} failed, {c['timedout']} timed out, "
            f"{c['skipped']} skipped of {c['total']} in {run.duration_s / 60:.1f} min "
            f"-> {out / kubelet / 'results.md'}"
        )
        if kubelet == "ours" and upstream is not None:
            ok, base = results.passed_where_upstream_passes(run)
            print(f"ours: passed where upstream passes: {ok} of {base}")
            summary["ours"]["passed_where_upstream_passes"] = [ok, base]
            if ok < base:
                status = 1
        if run.error:
            print(f"{kubelet}: RUN FAILED: {run.error}", file=sys.stderr)
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.conformance", description=__doc__)
    ap.add_argument("--kubelet", choices=["ours", "upstream", "both"], default="both")
    ap.add_argument("--focus", default=harness.CONFORMANCE_FOCUS, help="ginkgo --focus regex")
    ap.add_argument("--skip", default="", help="ginkgo --skip regex")
    ap.add_argument(
        "--suite",
        choices=sorted(harness.SUITES),
        default="e2e.test",
        help="the e2e binary: e2e.test (test/e2e/common) or e2e-storage.test (test/e2e/storage)",
    )
    ap.add_argument("--out", default="out/conformance", help="results go to OUT/<kubelet>/")
    ap.add_argument("--procs", type=int, default=4, help="ginkgo parallel processes")
    ap.add_argument("--timeout", type=float, default=75, help="minutes for the whole suite")
    ap.add_argument("--workdir", default="", help="cluster state (default: a fresh /tmp dir)")
    ap.add_argument(
        "--rewrite",
        action="store_true",
        help="run nothing: re-read OUT/<kubelet>/junit.xml and rewrite the results (new causes)",
    )
    args = ap.parse_args(argv)
    if args.rewrite:
        return rewrite(Path(args.out))
    # SIGTERM unwinds like Ctrl-C, so every process the harness started is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print(
            "the conformance harness runs containerd and kubelets: run it as root", file=sys.stderr
        )
        return 2
    started = records.begin(argv, "benches.conformance")
    kubelets = ["upstream", "ours"] if args.kubelet == "both" else [args.kubelet]
    out = Path(args.out)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kpy-conformance-"))
    try:
        harness.build(kubelets, args.suite)
        image_tars = harness.build_images(workdir / "images")
    except harness.RunFailed as err:
        print(f"conformance: {err}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = {
        "suite": args.suite,
        "focus": args.focus,
        "skip": args.skip,
        "results": str(out),
    }
    status = run_kubelets(kubelets, args, out, workdir, image_tars, summary)
    records.write(started, "conformance", summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
