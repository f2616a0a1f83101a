"""Churn soak of our kubelet (simulated runtime, real control plane).

    python -m benches.soak --minutes 60 [--rate 20] [--alive 2000] [--interval 60]
    python -m benches.soak --hours 2

Prints one JSON sample per interval and writes its record
benches/results/soak-<time>.json and a .png beside it (RSS, CPU, open fds, asyncio tasks, API requests per pod, pods alive).
Target: after the warm-up RSS grows < 5 %/h, fds and tasks stay flat.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from benches import records
from benches.density.spec import TEMPLATES
from benches.soak import SoakSpec, run_soak, write_results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.soak")
    length = ap.add_mutually_exclusive_group(required=True)
    length.add_argument("--minutes", type=float)
    length.add_argument("--hours", type=float)
    ap.add_argument("--rate", type=float, default=20.0, help="pods created/deleted per second")
    ap.add_argument("--alive", type=int, default=2000, help="pods kept alive")
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=10.0, help="minutes left out of the trends")
    ap.add_argument("--relist", type=float, default=1.0, help="our PLEG relist period (s)")
    ap.add_argument("--max-deleting", type=int, default=200,
                    help="no new pod while this many deletions are pending")  # fmt: skip
    ap.add_argument("--template", default="plain", choices=TEMPLATES,
                    help="pod template (benches/density)")  # fmt: skip
    ap.add_argument("--out", default=str(records.RESULTS))
    args = ap.parse_args(argv)
    minutes = args.minutes if args.minutes is not None else args.hours * 60
    spec = SoakSpec(minutes, args.rate, args.alive, args.interval, args.warmup, args.relist,
                     args.max_deleting, args.template)  # fmt: skip
    # Stopped with SIGTERM (or ^C): stop the parts and write what was sampled.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    print(f"work dir {work}", flush=True)
    started = records.begin(argv, "benches.soak")
    result = run_soak(spec, work)
    for p in write_results(result, Path(args.out), "soak", started):
        print(f"wrote {p}")
    print(
        f"baseline {result.baseline} drained {result.drained}\n"
        f"after warm-up: RSS {result.rss_growth_pct_per_h} %/h, fds {result.fds_per_h}/h, "
        f"tasks {result.tasks_per_h}/h" + (f"\nerror: {result.error}" if result.error else "")
    )
    return 1 if result.error else 0


if __name__ == "__main__":
    sys.exit(main())
