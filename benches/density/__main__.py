"""Density benchmark: the whole node under load, ours vs the upstream kubelet.

    python -m benches.density [--quick] [--out DIR] [--n 100 1000 5000]
                              [--relist 1 0.25 0.1] [--no-upstream] [--hold 30]
                              [--template plain volumes] [--unthrottled]
                              [--runtime sim|containerd] [--rate 50]

Starts the real control plane (with audit logging of node requests), then for
each N: our kubelet at each relist period and the upstream kubelet (built from
the same k8s.io/kubernetes release, at its default 1 s relist), each on a fresh
simulated runtime and a fresh Node. Writes DIR/result.json and DIR/*.png.
--quick runs N=100 with ours at 250 ms and upstream (if built), short holds.
--template picks the pods (see benches/density/harness.py): plain (one container,
no token, no volumes; the default) and/or volumes (a configMap, a secret, env from
the configMap and the projected service-account token volume). With volumes the
control plane also runs kube-controller-manager and kube-scheduler
(ControlPlane(controllers=True)), for the kube-root-ca.crt configMap.
--unthrottled adds the fairness control at every N: ours (at --unthrottled-relist)
and upstream again, both at kubeAPIQPS 2000 / burst 4000, so that neither
client-side rate limiter can explain a startup gap. Every run also records, over
its creation window, the kubelet's own histograms (rate limiter wait, API round
trips, pod start, status sync) and the audit log's timing of its requests
(result.json "evidence"; benches/density/evidence.py).
--runtime containerd runs every kubelet on a fresh private containerd with runc
(pause sandbox + busybox sleep, cgroupsPerQOS on under a cgroupRoot of the run's
own) instead of the simulated runtime, and also measures containerd's CPU and
RSS and the sum over its shims. Its defaults: N 50 100 200, ours at 250 ms,
pods created at 2/s (see CONTAINERD_RATE). The containerd is KPY_CONTAINERD's
(kubelet/testing/containerd.py: 2 by default, 1.6 from Debian).
--evented (containerd) adds, at every N, ours with the EventedPLEG gate: the
runtime's GetContainerEvents stream drives the PLEG and the relist runs every
300 s as a safety net (containerd 2 serves the stream; 1.6 does not).
--kills K (containerd) kills K running containers in each steady state
(--kill-rate per second) and records the status latency: kill -> the API
server's watch showing it (benches/density/kills.py).
--scrapes K measures each kubelet idle (no pod yet, DENSITY_IDLE_S, default 30 s)
and, in the steady state, K back-to-back fetches of /stats/summary and
/metrics/resource on the read-only port: the kubelet's CPU per scrape and at
metrics-server's 15 s period (benches/density/scrape.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benches import metric_parity, records
from benches.density import evidence, kwok
from benches.density.cluster import start_control_plane, upstream_kubelet
from benches.density.harness import Run
from benches.density.spec import (
    KUBE_API_BURST,
    KUBE_API_QPS,
    RUNTIMES,
    TEMPLATES,
    UNTHROTTLED_BURST,
    UNTHROTTLED_QPS,
    Result,
    Spec,
    dump,
    needs_controllers,
)
from kubelet.testing.controlplane import ControlPlane

# Pods created per second on containerd. Each pod costs a shim, a CNI ADD and
# two runc create/start rounds; on this shared 2-core VM (load 12-18) 60 pods
# created at 20/s came up at 2.7/s, so at 2/s startup latency shows the kubelet
# and the runtime's own per-pod time rather than a queue that grows with N.
CONTAINERD_RATE = 2.0
# 300 ran here too, but with about 1,700 host mounts every runc waits on the
# kernel's mount namespace lock and startup took minutes (see the README).
CONTAINERD_N = [50, 100, 200]
SIM_N = [100, 1000, 5000]
SIM_RELIST = [1.0, 0.25, 0.1]
CONTAINERD_RELIST = [0.25]


def table(results: list[Result]) -> str:
    def f(v: float | None, scale: float = 1.0, digits: int = 2) -> str:
        return "-" if v is None else f"{v * scale:.{digits}f}"

    head = (
        "| template | kubelet | QPS / burst | relist | N | running | startup p50 / p90 / p99 (s) "
        "| in-kubelet p50 / p99 (s) | all Running (s) | startup CPU (cores) | steady CPU (cores) | steady CPU p50 / p95 | RSS (MiB) | relist p50 / p99 (ms) | delete all (s) "
        "| API requests / pod |"
    )
    # The runtime's columns only where a run was on containerd, so the
    # simulated-runtime table reads as before.
    ctd = any(r.runtime == "containerd" for r in results)
    if ctd:
        head += (" runtime | containerd startup / steady CPU (cores) | containerd RSS (MiB) "
                 "| shims | shims CPU (cores) | shims RSS / PSS (MiB) | load avg 1/5/15 |")  # fmt: skip
    lines = [head, "|" + "---|" * (23 if ctd else 16)]
    for r in results:
        extra = ""
        if ctd:
            extra = (
                f" {r.runtime} | {f(r.containerd_startup_cpu_cores, digits=3)} / "
                f"{f(r.containerd_cpu_cores, digits=3)} | {f(r.containerd_rss_mib, digits=0)} "
                f"| {'-' if r.shims is None else r.shims} | {f(r.shims_cpu_cores, digits=3)} "
                f"| {f(r.shims_rss_mib, digits=0)} / {f(r.shims_pss_mib, digits=0)} "
                f"| {' / '.join(f'{x:.2f}' for x in r.load_avg) or '-'} |"
            )
        lines.append(
            f"| {r.template} | {r.kubelet} | {r.kube_api_qps} / {r.kube_api_burst} "
            f"| {int(r.relist_period_s * 1000)} ms | {r.n} | {r.running} "
            f"| {f(r.startup_p50_s)} / {f(r.startup_p90_s)} / {f(r.startup_p99_s)} "
            f"| {f(r.kubelet_start_p50_s)} / {f(r.kubelet_start_p99_s)} "
            f"| {f(r.all_running_s, digits=1)} | {f(r.startup_cpu_cores, digits=3)} "
            f"| {f(r.steady_cpu_cores, digits=3)} "
            f"| {f(r.steady_cpu_p50_cores, digits=3)} / {f(r.steady_cpu_p95_cores, digits=3)} "
            f"| {f(r.steady_rss_mib, digits=0)} "
            f"| {f(r.relist_p50_ms)} / {f(r.relist_p99_ms)} | {f(r.delete_all_s, digits=1)} "
            f"| {f(r.api_requests_per_pod, digits=1)} |"
            + extra
            + (f" FailedMount events: {r.failed_mount_events}" if r.failed_mount_events else "")
            + (f" error: {r.error}" if r.error else "")
        )
    return "\n".join(lines)


def status_table(results: list[Result]) -> str:
    """The PLEG comparison: kubelet and containerd CPU, startup and status latency."""
    lines = [
        "| kubelet | PLEG | relist | N | containerd | kubelet CPU startup / steady (cores) "
        "| containerd CPU steady (cores) | startup p99 (s) | killed | status latency p50 / p99 (s) "
        "| relist p50 / p99 during kills (ms) |",
        "|" + "---|" * 11,
    ]
    for r in results:

        def f(v: float | None, d: int = 3) -> str:
            return "-" if v is None else f"{v:.{d}f}"

        lines.append(
            f"| {r.kubelet} | {r.pleg} | {int(r.relist_period_s * 1000)} ms | {r.n} "
            f"| {r.containerd or '-'} | {f(r.startup_cpu_cores)} / {f(r.steady_cpu_cores)} "
            f"| {f(r.containerd_cpu_cores)} | {f(r.startup_p99_s, 2)} | {r.killed} "
            f"| {f(r.status_latency_p50_s)} / {f(r.status_latency_p99_s)} "
            f"| {f(r.kill_relist_p50_ms, 1)} / {f(r.kill_relist_p99_ms, 1)} |"
        )
    return "\n".join(lines)


def scrape_line(r: Result) -> str:
    """The idle kubelet and the stats scrapes' cost (--scrapes)."""
    eps = r.scrape.get("endpoints") or []
    each = ", ".join(
        f"{e['path']} {e['cpu_ms_per_scrape']:.1f} ms CPU ({e['bytes'] // 1024} KiB)" for e in eps
    )
    idle = (
        f"idle {r.idle_cpu_cores:.4f} cores, {r.idle_rss_mib:.0f} MiB; "
        if r.idle_cpu_cores is not None and r.idle_rss_mib is not None
        else ""
    )
    return (
        f"{idle}per scrape at N={r.n}: {each}; both every "
        f"{r.scrape.get('period_s')} s: {r.scrape.get('cores_at_period', 0):.4f} cores"
    )


def plots(results: list[Result], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []
    made = []
    # Colour: which kubelet at which relist period; line style: N.
    kinds = sorted({(r.template, r.kubelet, r.relist_period_s) for r in results},
                   key=lambda k: (k[0], k[1], -k[2]))  # fmt: skip
    colour = {k: f"C{i}" for i, k in enumerate(kinds)}
    many = len({r.template for r in results}) > 1
    styles = ["-", "--", ":", "-."]
    style = {n: styles[i % 4] for i, n in enumerate(sorted({r.n for r in results}, reverse=True))}
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        if not r.startup_latencies_s:
            continue
        xs = r.startup_latencies_s
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", color=colour[(r.template, r.kubelet, r.relist_period_s)],
                linestyle=style[r.n],
                label=(f"{r.template} " if many else "")
                + f"{r.kubelet} {int(r.relist_period_s * 1000)}ms N={r.n}")  # fmt: skip
    ax.set_xlabel("pod startup latency: created -> Running seen in a watch (s)")
    ax.set_ylabel("fraction of pods")
    ax.set_xscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    p = out / "startup_cdf.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    made.append(p)
    for metric, ctd_metric, label, fname in (
        ("steady_cpu_cores", "containerd_cpu_cores", "steady-state CPU (cores)", "cpu_vs_n.png"),
        ("steady_rss_mib", "containerd_rss_mib", "RSS (MiB)", "rss_vs_n.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series: dict[str, list[tuple[int, float]]] = {}
        for r in results:
            if r.error:
                continue
            key = (
                f"{r.template} " if many else ""
            ) + f"{r.kubelet} {int(r.relist_period_s * 1000)}ms"
            v = getattr(r, metric)
            if v is not None:
                series.setdefault(key, []).append((r.n, v))
            # containerd beside the kubelet that drove it
            cv = getattr(r, ctd_metric)
            if cv is not None:
                series.setdefault(f"containerd under {key}", []).append((r.n, cv))
        for key, pts in sorted(series.items()):
            pts.sort()
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=key)
        ax.set_xlabel("pods (N)")
        ax.set_ylabel(label)
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        p = out / fname
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def extras(results: list[Result], work: Path, out: Path) -> None:
    """The ceiling ratios (with --kwok) and the metric parity of ours against
    upstream (both scraped at the end of their steady states, same N)."""
    ratios = kwok.ceiling_ratios(results)
    if ratios:
        (out / "ceiling.json").write_text(json.dumps(ratios, indent=1))
        print("\nover kwok (the ceiling), same run:")
        for row in ratios:
            print(f"  {row['kubelet']} {row['relist_ms']} ms N={row['n']}: all Running "
                  f"{row['all_running_over_kwok']}x, p50 {row['startup_p50_over_kwok']}x, "
                  f"p99 {row['startup_p99_over_kwok']}x")  # fmt: skip
    scrapes: dict[str, Path] = {}
    for d in sorted(work.glob("run-*")):
        kind = d.name.split("-")[2]
        if (d / "metrics-steady.txt").exists():
            scrapes.setdefault(kind, d / "metrics-steady.txt")
    if "ours" in scrapes and "upstream" in scrapes:
        report = metric_parity.compare(
            metric_parity.families(scrapes["ours"].read_text()),
            metric_parity.families(scrapes["upstream"].read_text()),
            metric_parity.not_served(),
        )
        summary = metric_parity.summary(report)
        (out / "metric_parity.json").write_text(json.dumps(summary, indent=1))
        print(f"\nmetric parity with upstream's /metrics: {summary}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benches.density")
    ap.add_argument("--quick", action="store_true", help="N=100, ours at 250 ms + upstream")
    ap.add_argument("--out", default="density-results")
    ap.add_argument("--runtime", choices=RUNTIMES, default="sim",
                    help="sim: the simulated runtime; containerd: a private containerd "
                    "with runc per run")  # fmt: skip
    ap.add_argument("--n", type=int, nargs="+",
                    help=f"pod counts (default {SIM_N}; containerd {CONTAINERD_N})")  # fmt: skip
    ap.add_argument("--relist", type=float, nargs="+",
                    help=f"our relist periods, s (default {SIM_RELIST}; containerd "
                    f"{CONTAINERD_RELIST})")  # fmt: skip
    ap.add_argument("--rate", type=float,
                    help=f"pods created per second (default 50; containerd {CONTAINERD_RATE})")  # fmt: skip
    ap.add_argument("--hold", type=float, default=30.0, help="steady state seconds")
    ap.add_argument("--evented", action="store_true",
                    help="containerd: also ours with the EventedPLEG gate at every N")  # fmt: skip
    ap.add_argument("--evented-first", action="store_true",
                    help="run the evented row before the relist rows at each N (load-order control)")  # fmt: skip
    ap.add_argument("--abba", action="store_true",
                    help="at each N: ours, upstream, upstream, ours (run-order control: "
                    "each kubelet runs first once and second once)")  # fmt: skip
    ap.add_argument("--kills", type=int, default=0,
                    help="containerd: containers killed per run for the status latency")  # fmt: skip
    ap.add_argument("--kill-rate", type=float, default=2.0, help="kills per second")
    ap.add_argument("--no-upstream", action="store_true")
    ap.add_argument("--cri-control", action="store_true",
                    help="containerd: time the relist's two List calls straight to the "
                    "runtime beside the kubelet in the steady state (the relist's control)")  # fmt: skip
    ap.add_argument("--changes", type=int, default=0, metavar="K",
                    help="after the steady state, stop K containers through the CRI "
                    "(10/s) and time each change to the watch")  # fmt: skip
    ap.add_argument("--kwok", action="store_true",
                    help="also run kwok (the ceiling: no runtime) at every N; "
                    "ratios to it in ceiling.json")  # fmt: skip
    ap.add_argument(
        "--unthrottled",
        action="store_true",
        help=f"also run both kubelets at kubeAPIQPS {UNTHROTTLED_QPS} / burst "
        f"{UNTHROTTLED_BURST} at every N (the rate-limiter control)",
    )
    ap.add_argument("--unthrottled-relist", type=float, default=0.25,
                    help="our relist period in the unthrottled rows")  # fmt: skip
    ap.add_argument(
        "--template",
        nargs="+",
        choices=TEMPLATES,
        default=["plain"],
        help="pod templates, each run at every N (volumes: configMap, secret, env, token)",
    )
    ap.add_argument(
        "--plot-only",
        metavar="RESULT_JSON",
        help="redraw the table and plots of an earlier run into --out",
    )
    ap.add_argument("--scrapes", type=int, default=0, metavar="K",
                    help="measure the idle kubelet before the pods, and K scrapes of "
                    "/stats/summary and /metrics/resource in the steady state "
                    "(benches/density/scrape.py)")  # fmt: skip
    ap.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on our kubelet during each steady state (top frames in result.json)",
    )
    return ap


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The runtime's defaults for what was not given; --quick's small run."""
    on_ctd = args.runtime == "containerd"
    if args.n is None:
        args.n = CONTAINERD_N if on_ctd else SIM_N
    if args.relist is None:
        args.relist = CONTAINERD_RELIST if on_ctd else SIM_RELIST
    if args.rate is None:
        args.rate = CONTAINERD_RATE if on_ctd else 50.0
    if args.quick:
        args.n, args.relist, args.hold = [100], [0.25], 10.0
    return args


def _plot_only(result_json: Path, out: Path) -> None:
    """The table and plots of an earlier run's result.json, drawn again into out."""
    known = set(Result.__dataclass_fields__)
    loaded = [Result(**{k: v for k, v in d.items() if k in known})
              for d in json.loads(result_json.read_text())]  # fmt: skip
    print(table(loaded))
    for p in plots(loaded, out):
        print(f"plot: {p}")


def _specs(args: argparse.Namespace, have_upstream: bool) -> list[Spec]:
    """Every run of the benchmark, in order: at each template and N, ours at
    each relist period (and evented), upstream, kwok and the unthrottled rows."""
    on_ctd = args.runtime == "containerd"
    specs: list[Spec] = []
    for template in args.template:
        for n in args.n:
            kill = {"kills": args.kills if on_ctd else 0, "kill_rate": args.kill_rate,
                    "scrapes": args.scrapes, "cri_control": args.cri_control and on_ctd}  # fmt: skip
            relists = [Spec("ours", rl, n, args.rate, args.hold, args.profile, template,
                            runtime=args.runtime, changes=args.changes, **kill)
                        for rl in args.relist]  # fmt: skip
            evented = [Spec("ours", 1.0, n, args.rate, args.hold, args.profile, template,
                            runtime=args.runtime, evented=True, changes=args.changes, **kill)] if args.evented and on_ctd else []  # fmt: skip
            ours = evented + relists if args.evented_first else relists + evented
            specs += ours
            if have_upstream:
                up = Spec("upstream", 1.0, n, args.rate, args.hold, template=template,
                          runtime=args.runtime, changes=args.changes, **kill)  # fmt: skip
                specs += [up, up, *ours] if args.abba else [up]
            if args.kwok:
                specs.append(Spec("kwok", 0.0, n, args.rate, args.hold, template=template))
            if args.unthrottled:
                specs.append(Spec("ours", args.unthrottled_relist, n, args.rate, args.hold,
                                  args.profile, template, UNTHROTTLED_QPS, UNTHROTTLED_BURST,
                                  runtime=args.runtime))  # fmt: skip
                if have_upstream:
                    specs.append(Spec("upstream", 1.0, n, args.rate, args.hold,
                                      template=template, qps=UNTHROTTLED_QPS, burst=UNTHROTTLED_BURST,
                                      runtime=args.runtime))  # fmt: skip
    return specs


def _run_all(
    cp: ControlPlane, specs: list[Spec], work: Path, out: Path, on_ctd: bool
) -> list[Result]:
    """Each run in turn on one control plane (stopped at the end); the results
    so far are written after each."""
    results: list[Result] = []
    try:
        for i, spec in enumerate(specs):
            t0 = time.monotonic()
            if on_ctd:
                print(f"run {i}: {spec.kubelet} N={spec.n} on containerd; load average "
                      + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)  # fmt: skip
            r = asyncio.run(Run(cp, spec, work, i).run())
            results.append(r)
            print(f"[{time.monotonic() - t0:.0f}s] " + table([r]).splitlines()[-1], flush=True)
            if r.container_change:
                print(f"  container change -> API: {r.container_change}", flush=True)
            if r.evidence:
                print(evidence.brief(r.evidence), flush=True)
            if r.scrape:
                print("  " + scrape_line(r), flush=True)
            if r.sim_startup_cpu_cores is not None:
                print(f"  simulated runtime CPU: {r.sim_startup_cpu_cores:.3f} cores while pods "
                      f"started, {r.sim_cpu_cores or 0:.3f} steady", flush=True)  # fmt: skip
            dump(results, out / "result.json")
    finally:
        cp.stop()
    return results


def _print_profiles(results: list[Result]) -> None:
    for r in results:
        for title, frames in (
            ("start-up, self time", r.profile_startup_top),
            ("start-up, inclusive time in kubelet/", r.profile_startup_inclusive),
            ("steady, self time", r.profile_top),
            ("steady, inclusive time in kubelet/", r.profile_inclusive),
        ):
            if frames:
                print(f"\nprofile, {r.template}, ours {int(r.relist_period_s * 1000)} ms, "
                      f"N={r.n}, {title} (share of samples):")  # fmt: skip
                for frame, share in frames:
                    print(f"  {share * 100:5.1f}%  {frame}")


def _write_records(started: records.Started, out: Path, on_ctd: bool) -> None:
    name = "density-containerd" if on_ctd else "density"
    records.write(started, name, json.loads((out / "result.json").read_text()))
    # The ceiling and the metric parity, each a record of its own.
    for extra, rec in (("ceiling.json", "density-ceiling"),
                       ("metric_parity.json", "metric-parity")):  # fmt: skip
        if (out / extra).exists():
            records.write(started, rec, json.loads((out / extra).read_text()))


def main(argv: list[str] | None = None) -> int:
    args = _with_defaults(_parser().parse_args(argv))
    on_ctd = args.runtime == "containerd"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = records.begin(argv, "benches.density")
    if args.plot_only:
        _plot_only(Path(args.plot_only), out)
        return 0
    have_upstream = upstream_kubelet() is not None and not args.no_upstream
    if args.kwok and kwok.kwok_binary() is None:
        print("kwok not built: run hack/bench-parts/kwok.sh", file=sys.stderr)
        return 2
    if not have_upstream and not args.no_upstream:
        print("upstream kubelet not built: run hack/build-control-plane.sh kubelet; "
              "running ours only", file=sys.stderr)  # fmt: skip
    specs = _specs(args, have_upstream)
    work = Path(tempfile.mkdtemp(prefix="density-"))
    print(f"work dir {work}; kubelet clients at kubeAPIQPS={KUBE_API_QPS} "
          f"burst={KUBE_API_BURST}"
          + (f" (and {UNTHROTTLED_QPS}/{UNTHROTTLED_BURST})" if args.unthrottled else "")
          + "; kube-apiserver --max-requests-inflight=2000 "
          "--max-mutating-requests-inflight=1000 --delete-collection-workers=16",
          flush=True)  # fmt: skip
    controllers = needs_controllers(args.template)
    if controllers:
        print("control plane with kube-controller-manager and kube-scheduler "
              "(kube-root-ca.crt for the projected token volume)", flush=True)  # fmt: skip
    cp = start_control_plane(work, controllers)
    results = _run_all(cp, specs, work, out, on_ctd)
    print()
    print(table(results))
    if on_ctd:
        print()
        print(status_table(results))
    _print_profiles(results)
    extras(results, work, out)
    for p in plots(results, out):
        print(f"plot: {p}")
    print(f"results: {out / 'result.json'}")
    if not args.quick:
        _write_records(started, out, on_ctd)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
