"""cgroup stats against the kernel's floor, in one run:

    python -m benches.cgroup_floor [--n 10000] [--whole 2000] [--rounds 9] [--real N]
                                   [--housekeeping PODS] [--json FILE]

Every parser figure sits next to its no-parse floor: the same files opened,
read and closed (or pread through the same kept descriptors) by C code on the
same threads, with no parsing and no result objects. Rows:
- all 11 files per cgroup (what /metrics/cadvisor needs), parser vs floor, and
  the pure-Python reference;
- the files each consumer needs (kubelet.stats.types: EVICTION 2 files,
  RESOURCE_METRICS 3, SUMMARY 4), parser vs floor;
- CgroupReader with the SUMMARY files kept open up to the budget this process
  may use (descriptor_budget(): half the soft RLIMIT_NOFILE), with the share of
  file reads that budget covers; and on a tree small enough (--whole) to be
  covered whole.
The tree is generated regular files (the layout and contents of cgroup v2 with
a kernel's 40-key memory.stat), as in benches/bench_cgroup_stats.py. With
--real N (root and a writable cgroup2 mount) N real cgroups are made under that
mount and read the same way, through kernfs, with the files that exist there.
--housekeeping PODS measures what the kubelet itself spends: the StatsProvider's
eviction pass (every 10 s, pods' working sets) and a /metrics/resource
collection over PODS pod cgroups, as CPU time (process, all threads) per pass.
Medians; variants interleaved round by round so machine load hits all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benches import records
from benches.bench_cgroup_stats import _files
from kubelet import stats
from kubelet.stats import cgstats, reference
from kubelet.stats.types import EVICTION, RESOURCE_METRICS, SUMMARY, files_of


def build_tree(root: Path, n: int, prefix: str) -> list[str]:
    paths = []
    for i in range(n):
        rel = f"{prefix}/kubepods.slice/pod{i:05d}"
        d = root / rel
        d.mkdir(parents=True)
        for name, text in _files(i).items():
            (d / name).write_text(text)
        paths.append(rel)
    return paths


def timeit(rounds: int, variants: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median wall seconds per variant, and its median CPU seconds (process:
    all threads; robust to waiting for a CPU on a busy machine) as "<k> cpu";
    one call of each per round, in turn."""
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()  # warm: page cache, dentries, descriptors opened
    for _ in range(rounds):
        for k, fn in variants.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    out = {k: statistics.median(v) for k, v in wall.items()}
    out.update({f"{k} cpu": statistics.median(v) for k, v in cpu.items()})
    return out


def ms(v: float) -> str:
    return f"{v * 1e3:8.2f} ms"


def fake_tree_rows(root: Path, n: int, whole: int, rounds: int) -> dict[str, Any]:
    big = build_tree(root, n, "big")
    small = build_tree(root, whole, "small")
    r = str(root)
    budget = stats.descriptor_budget()
    reader = cgstats.CgroupReader(2, r, fields=SUMMARY, max_fds=budget, threads=1)
    reader_ev = cgstats.CgroupReader(2, r, fields=EVICTION, max_fds=budget, threads=1)
    reader_small = cgstats.CgroupReader(2, r, fields=SUMMARY, max_fds=budget, threads=1)
    nsum = len(files_of(SUMMARY))
    v = {
        "parse all 11 files": lambda: cgstats.parse_cgroups(big, 2, r),
        "floor all 11 files": lambda: cgstats.floor_read(big, r),
        "parse SUMMARY (4 files)": lambda: cgstats.parse_cgroups(big, 2, r, fields=SUMMARY),
        "floor SUMMARY (4 files)": lambda: cgstats.floor_read(big, r, SUMMARY),
        "parse RESOURCE (3 files)": lambda: cgstats.parse_cgroups(
            big, 2, r, fields=RESOURCE_METRICS
        ),
        "floor RESOURCE (3 files)": lambda: cgstats.floor_read(big, r, RESOURCE_METRICS),
        "parse EVICTION (2 files)": lambda: cgstats.parse_cgroups(big, 2, r, fields=EVICTION),
        "floor EVICTION (2 files)": lambda: cgstats.floor_read(big, r, EVICTION),
        "reader SUMMARY, budget": lambda: reader.read(big),
        "floor of reader, budget": lambda: reader.floor(big),
        "reader EVICTION, budget": lambda: reader_ev.read(big),
        "floor of EVICTION reader, budget": lambda: reader_ev.floor(big),
        "parse SUMMARY, 1 thread": lambda: cgstats.parse_cgroups(
            big, 2, r, threads=1, fields=SUMMARY
        ),
        "floor SUMMARY, 1 thread": lambda: cgstats.floor_read(big, r, SUMMARY, threads=1),
        f"parse SUMMARY, {whole}": lambda: cgstats.parse_cgroups(small, 2, r, fields=SUMMARY),
        f"floor SUMMARY, {whole}": lambda: cgstats.floor_read(small, r, SUMMARY),
        f"reader SUMMARY, {whole} whole": lambda: reader_small.read(small),
        f"floor of reader, {whole} whole": lambda: reader_small.floor(small),
    }
    med = timeit(rounds, v)
    ref = timeit(max(1, rounds // 3), {"x": lambda: reference.parse_cgroups(big, 2, r)})
    med["reference all 11 files"], med["reference all 11 files cpu"] = ref["x"], ref["x cpu"]
    covered = len(reader.kept) * nsum / (n * nsum)
    out = {
        "n": n,
        "whole": whole,
        "budget_fds": budget,
        "kept_cgroups": len(reader.kept),
        "kept_fds": reader.open_fds,
        "files_covered_share": round(covered, 4),
        "kept_small": len(reader_small.kept),
        "kept_eviction": len(reader_ev.kept),
        "medians_s": {k: round(x, 6) for k, x in med.items()},
    }
    reader.close()
    reader_ev.close()
    reader_small.close()
    return out


def real_rows(n: int, rounds: int) -> dict[str, Any] | None:
    """N empty real cgroups on the writable cgroup2 mount, read through kernfs."""
    mount = None
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            sep = parts.index("-")
            if parts[sep + 1] == "cgroup2" and os.access(parts[4], os.W_OK):
                mount = parts[4]
    if mount is None:
        print("no writable cgroup2 mount: no --real rows", file=sys.stderr)
        return None
    top = Path(mount) / f"kubelet-py-bench-{os.getpid()}"
    top.mkdir()
    paths = []
    try:
        for i in range(n):
            (top / f"pod{i:05d}").mkdir()
            paths.append(f"{top.name}/pod{i:05d}")
        probe = top / "pod00000"
        fields = frozenset(
            f for f, name in (("cpu_usage_ns", "cpu.stat"), ("memory_usage", "memory.current"),
                              ("memory_working_set", "memory.stat"), ("pids_current", "pids.current"),
                              ("cpu_pressure", "cpu.pressure"), ("memory_pressure", "memory.pressure"),
                              ("io_pressure", "io.pressure"))
            if (probe / name).exists() and (f != "memory_working_set" or (probe / "memory.current").exists())
        )  # fmt: skip
        budget = stats.descriptor_budget()
        rd = cgstats.CgroupReader(2, mount, fields=fields, max_fds=budget)
        v = {
            "parse (open each)": lambda: cgstats.parse_cgroups(paths, 2, mount, fields=fields),
            "floor (open each)": lambda: cgstats.floor_read(paths, mount, fields),
            "reader, budget": lambda: rd.read(paths),
            "floor of reader, budget": lambda: rd.floor(paths),
        }
        med = timeit(rounds, v)
        out = {
            "n": n,
            "mount": mount,
            "files": files_of(fields),
            "budget_fds": budget,
            "kept_cgroups": len(rd.kept),
            "files_covered_share": round(len(rd.kept) / n, 4),
            "medians_s": {k: round(x, 6) for k, x in med.items()},
        }
        rd.close()
        return out
    finally:
        for p in sorted(top.iterdir(), reverse=True) if top.exists() else []:
            p.rmdir() if p.is_dir() else None
        top.rmdir()


def housekeeping(root: Path, pods: int, rounds: int) -> dict[str, Any]:
    """The StatsProvider's own passes over `pods` pod cgroups of a generated tree."""
    from kubelet.cm.cgroup_manager import PodContainerManager
    from kubelet.stats.provider import StatsProvider

    pod_objs = []
    for i in range(pods):
        p = {
            "metadata": {"name": f"p{i:05d}", "namespace": "bench", "uid": f"u-{i:05d}"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"qosClass": "BestEffort"},
        }
        rel = PodContainerManager.name(p)
        d = root / "hk" / rel
        d.mkdir(parents=True)
        for name, text in _files(i).items():
            (d / name).write_text(text)
        pod_objs.append(p)
    mi = root / "mountinfo"
    mi.write_text(f"30 20 0:26 / {root / 'hk'} rw,nosuid - cgroup2 cgroup2 rw\n")
    prov = StatsProvider(lambda: pod_objs, str(root), "bench-node", mountinfo=str(mi))

    def cpu_of(fn: Callable[[], object]) -> tuple[float, float]:
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        return time.process_time() - c0, time.perf_counter() - w0

    def eviction() -> object:
        prov.invalidate()
        return prov.pod_working_sets()

    def resource() -> object:
        prov.invalidate()
        return prov.snapshot(RESOURCE_METRICS)

    def summary() -> object:
        prov.invalidate()
        return prov.snapshot(SUMMARY)

    out: dict[str, Any] = {"pods": pods, "kept_cgroups": None}
    for name, fn in (("eviction pass", eviction), ("resource collection", resource),
                     ("summary collection", summary)):  # fmt: skip
        fn()
        runs = [cpu_of(fn) for _ in range(rounds)]
        out[name] = {
            "cpu_s": round(statistics.median(c for c, _ in runs), 6),
            "wall_s": round(statistics.median(w for _, w in runs), 6),
        }
    out["kept_cgroups"] = prov.kept_cgroups
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.cgroup_floor")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--whole", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--real", type=int, default=0, help="also N real cgroups (root, cgroup2)")
    ap.add_argument("--housekeeping", type=int, default=5000, help="pods (0: skip)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if cgstats.__file__ and "debug" in cgstats.__file__:
        raise SystemExit("refusing a debug build")
    started = records.begin(argv, "benches.cgroup_floor")
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="cgfloor-"))
    try:
        res["fake"] = fake_tree_rows(tmp, args.n, args.whole, args.rounds)
        if args.real:
            res["real"] = real_rows(args.real, args.rounds)
        if args.housekeeping:
            res["housekeeping"] = housekeeping(tmp, args.housekeeping, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["loadavg_after"] = os.getloadavg()
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    records.write(started, "cgroup_floor", res)
    return 0


def report(res: dict[str, Any]) -> None:
    f = res["fake"]
    m = f["medians_s"]
    n, w = f["n"], f["whole"]
    print(f"\n{res['date']}, {res['cpus']} cores, load {res['loadavg_before'][0]:.1f} -> "
          f"{res['loadavg_after'][0]:.1f}; generated tree of regular files")  # fmt: skip
    print(f"{'cgroup v2 dirs, what is read':<42}{'parser CPU':>12}{'floor CPU':>12}{'ratio':>7}"
          f"{'parser wall':>13}{'floor wall':>12}{'ratio':>7}")  # fmt: skip

    def row(label: str, p: str, fl: str, m: dict[str, float] = m) -> None:
        pc, fc = m[p + " cpu"], m[fl + " cpu"]
        print(f"{label:<42}{ms(pc):>12}{ms(fc):>12}{pc / fc:>6.2f}x"
              f"{ms(m[p]):>13}{ms(m[fl]):>12}{m[p] / m[fl]:>6.2f}x")  # fmt: skip

    row(f"{n:,}, all 11 files (open each)", "parse all 11 files", "floor all 11 files")
    row(
        f"{n:,}, SUMMARY: 4 files (open each)", "parse SUMMARY (4 files)", "floor SUMMARY (4 files)"
    )
    row(
        f"{n:,}, RESOURCE: 3 files (open each)",
        "parse RESOURCE (3 files)",
        "floor RESOURCE (3 files)",
    )
    row(
        f"{n:,}, EVICTION: 2 files (open each)",
        "parse EVICTION (2 files)",
        "floor EVICTION (2 files)",
    )
    row(f"{n:,}, SUMMARY, kept up to {f['budget_fds']:,} fds", "reader SUMMARY, budget",
        "floor of reader, budget")  # fmt: skip
    row(
        f"{n:,}, SUMMARY (open each), 1 thread",
        "parse SUMMARY, 1 thread",
        "floor SUMMARY, 1 thread",
    )
    row(f"{n:,}, EVICTION, kept up to {f['budget_fds']:,} fds", "reader EVICTION, budget",
        "floor of EVICTION reader, budget")  # fmt: skip
    row(f"{w:,}, SUMMARY (open each)", f"parse SUMMARY, {w}", f"floor SUMMARY, {w}")
    row(f"{w:,}, SUMMARY, kept whole", f"reader SUMMARY, {w} whole", f"floor of reader, {w} whole")
    ref = m["reference all 11 files cpu"]
    print(f"reference (pure Python), {n:,}, all 11 files: {ms(ref)} CPU "
          f"({ref / m['parse all 11 files cpu']:.1f}x the parser's CPU)")  # fmt: skip
    print(f"budget {f['budget_fds']:,} fds keeps {f['kept_cgroups']:,} of {n:,} cgroups "
          f"({f['files_covered_share'] * 100:.0f}% of the SUMMARY file reads); "
          f"{f['kept_small']:,} of {w:,} kept whole; EVICTION (2 files) keeps "
          f"{f['kept_eviction']:,} of {n:,}")  # fmt: skip
    r = res.get("real")
    if r:
        rm = r["medians_s"]
        print(f"real cgroups ({r['mount']}, empty, files {', '.join(r['files'])}):")
        row(f"{r['n']:,}, open each", "parse (open each)", "floor (open each)", rm)
        row(f"{r['n']:,}, kept ({r['kept_cgroups']:,} kept)", "reader, budget",
            "floor of reader, budget", rm)  # fmt: skip
    h = res.get("housekeeping")
    if h:
        print(f"\nStatsProvider at {h['pods']:,} pods (kept cgroups {h['kept_cgroups']:,}), "
              "per pass (CPU: process, all threads):")  # fmt: skip
        ev = h["eviction pass"]["cpu_s"]
        rc = h["resource collection"]["cpu_s"]
        for k in ("eviction pass", "resource collection", "summary collection"):
            print(f"  {k:<24}{ms(h[k]['cpu_s'])} CPU, {ms(h[k]['wall_s'])} wall")
        print(f"  eviction every 10 s: {ev / 10 * 100:.2f}% of a core; with a metrics-server "
              f"scrape every 15 s: {(ev / 10 + rc / 15) * 100:.2f}%")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
