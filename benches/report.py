"""Run the kernel benchmarks and print native vs reference side by side, and
keep the published figures tied to their records.

    python -m benches.report [--json FILE] [--quick] [--no-record]
    python -m benches.report --check     # every figure in README.md and docs/ against its record
    python -m benches.report --write     # render the figure blocks from the records

Ratio = reference median / native median (how many times faster native is).
A full run writes its record to benches/results/kernels-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

from benches import figures, records

KERNELS = (
    "relist_diff",
    "relist_cycle",
    "cgroup_stats",
    "workqueue",
    "workqueue_idle",
    "ratelimiting_queue",
    "fnv32a",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.report")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("-k", help="only benchmarks matching this pytest -k expression")
    ap.add_argument("--no-record", action="store_true", help="do not write a record")
    ap.add_argument("--check", action="store_true", help="check the figures against the records")
    ap.add_argument("--write", action="store_true", help="render the figures from the records")
    args = ap.parse_args(argv)
    if args.check or args.write:
        problems = figures.run(write=args.write)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"figures: {len(problems)} problem(s)", file=sys.stderr)
        return 1 if problems else 0
    started = records.begin(argv, "benches.report")
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "bench.json")
        cmd = [
            sys.executable, "-m", "pytest", here, "-q", "-p", "no:cacheprovider",
            f"--benchmark-json={raw}", "--benchmark-disable-gc", "--benchmark-warmup=on",
            "-o", "testpaths=benches", "-o", "python_files=bench_*.py",
            # Benchmarks are not tests: no per-test timeout (a loaded machine
            # once spent it tearing down the 10,000-cgroup tree).
            "-o", "timeout=0",
        ]  # fmt: skip
        if args.quick:
            cmd += ["--benchmark-min-rounds=3", "--benchmark-max-time=0.2"]
        if args.k:
            cmd += ["-k", args.k]
        rc = subprocess.call(cmd)
        if rc != 0:
            return rc
        with open(raw) as fh:
            data = json.load(fh)
    med: dict[str, dict[str, float]] = defaultdict(dict)
    for b in data["benchmarks"]:
        med[b["group"]][b["extra_info"]["impl"]] = b["stats"]["median"]
    summary = {}
    print(f"\n{'kernel':<26}{'native':>14}{'reference':>14}{'ratio':>9}")
    others = {g: v for g, v in med.items() if "native" not in v and "reference" not in v}
    for group in sorted(
        (g for g in med if g not in others),
        key=lambda g: (g.rsplit("_", 1)[0], int(g.rsplit("_", 1)[1])),
    ):
        n, r = med[group].get("native"), med[group].get("reference")
        ratio = r / n if n and r else None
        summary[group] = {"native_s": n, "reference_s": r, "ratio": ratio}
        fmt = lambda v: f"{v * 1e3:.3f} ms" if v is not None else "-"  # noqa: E731
        print(f"{group:<26}{fmt(n):>14}{fmt(r):>14}{(f'{ratio:.1f}x' if ratio else '-'):>9}")
    gc_groups = sorted(g for g in others if g.startswith("gc_"))
    if gc_groups:
        print(f"\n{'GC pass (bench_gc.py)':<26}{'ours':>14}{'+ decode':>14}")
        for group in gc_groups:
            ours, dec = others[group].get("gc"), others[group].get("decode")
            summary[group] = {"gc_s": ours, "with_decode_s": dec}
            fmt = lambda v: f"{v * 1e3:.3f} ms" if v is not None else "-"  # noqa: E731
            print(f"{group:<26}{fmt(ours):>14}{fmt(dec):>14}")
    print(
        f"\nmachine: {os.cpu_count()} cores; {data['machine_info'].get('cpu', {}).get('brand_raw', '')}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2, sort_keys=True)
    if not (args.quick or args.k or args.no_record):
        cpu = data["machine_info"].get("cpu", {}).get("brand_raw", "")
        records.write(started, "kernels", {"cpu": cpu, "kernels": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
