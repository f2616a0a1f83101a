"""A record of how long one run of hack/test.sh took.

    python -m benches.ci_time out/test-timings.json [--cold] [--note TEXT] [--pytest-log LOG]

hack/test.sh writes out/test-timings.json at the end of every run (the machine
and its load at the start, the time of each phase and of each part's set-up);
this turns one into benches/results/ci-time-<time>.json. `--cold`: the run
started from a fresh clone with no venv, no ~/.cache/kubelet-py and no Go
module or build cache (say so only when it is true). `--pytest-log`: pytest's
output with `--durations=N` (CI prints the 50 slowest tests); they go into the
record too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benches import records

DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)$")


def slowest(log: str) -> list[dict[str, object]]:
    """The `--durations` lines of a pytest run, slowest first."""
    out: list[dict[str, object]] = []
    for line in log.splitlines():
        m = DURATION.match(line.strip())
        if m:
            out.append({"s": float(m.group(1)), "when": m.group(2), "test": m.group(3)})
    return sorted(out, key=lambda d: -float(str(d["s"])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.ci_time")
    ap.add_argument("timings", type=Path)
    ap.add_argument("--cold", action="store_true", help="the run started from nothing cached")
    ap.add_argument("--note", default="", help="what else a reader should know about the run")
    ap.add_argument("--pytest-log", type=Path, help="pytest output with --durations")
    args = ap.parse_args(argv)
    t = json.loads(args.timings.read_text())
    command = ("CI=true " if t["ci"] else "") + " ".join(["hack/test.sh", t["args"]]).strip()
    started = records.Started(command, t["commit"], t["started"], t["machine"])
    figures = {
        "cold": args.cold,
        "total_s": t["total_s"],
        # null: the run had not ended when it was recorded
        "total_min": None if t["total_s"] is None else round(t["total_s"] / 60, 1),
        "phases_s": t["phases_s"],
        "parts_s": t["parts_s"],
    }
    known = {"started", "commit", "ci", "args", "machine", "total_s", "phases_s", "parts_s"}
    figures.update({k: v for k, v in t.items() if k not in known})  # e.g. a finer breakdown
    if args.pytest_log:
        figures["slowest_tests"] = slowest(args.pytest_log.read_text(errors="replace"))
    records.write(started, "ci-time", figures, note=args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
