"""What a density run is asked to do (Spec) and what it measured (Result),
with the settings both kubelets share; benches/density/harness.py runs it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The same client limits for both kubelets (upstream defaults are 50/100): at
# 50 pods/s each pod needs about two status writes, which 50 QPS cannot carry.
KUBE_API_QPS = 200
KUBE_API_BURST = 400
# The fairness control (--unthrottled): limits so high that neither kubelet's
# client-side rate limiter can be what delays its status writes.
UNTHROTTLED_QPS = 2000
UNTHROTTLED_BURST = 4000
TEMPLATES = ("plain", "volumes")
# sim: kubelet.simruntime; containerd: a private containerd with runc per run
# (benches/density/containerd.py), pods in the kubelet's own pod cgroups.
RUNTIMES = ("sim", "containerd")
CONFIGMAP = "density-config"
SECRET = "density-secret"


def needs_controllers(templates: list[str]) -> bool:
    """kube-root-ca.crt (read by every kube-api-access-* volume) comes from
    kube-controller-manager; only the volumes template mounts it."""
    return "volumes" in templates


@dataclass
class Spec:
    kubelet: str  # "ours" | "upstream" | "kwok" (the ceiling)
    relist: float  # seconds
    n: int
    rate: float = 50.0  # pods created per second
    hold: float = 30.0  # steady state measured for this long
    profile: bool = False  # py-spy on our kubelet during the steady state
    template: str = "plain"  # one of TEMPLATES
    qps: int = KUBE_API_QPS  # kubeAPIQPS / kubeAPIBurst of the kubelet
    burst: int = KUBE_API_BURST
    runtime: str = "sim"  # one of RUNTIMES
    changes: int = 0  # containers stopped after the steady state (benches/density/changes.py)
    evented: bool = False  # ours with the EventedPLEG gate (containerd 2 serves the events)
    kills: int = 0  # containerd: containers killed in the steady state (status latency)
    kill_rate: float = 2.0  # kills per second
    scrapes: int = 0  # stats endpoints fetched this often in the steady state (scrape.py)
    # containerd: the runtime's own List latency timed beside the kubelet in the
    # steady state (cri_probe.py), the control for its relist duration
    cri_control: bool = False


@dataclass
class Result:
    kubelet: str
    relist_period_s: float
    n: int
    creation_rate: float
    running: int = 0
    startup_p50_s: float | None = None
    startup_p90_s: float | None = None
    startup_p99_s: float | None = None
    all_running_s: float | None = None
    steady_cpu_cores: float | None = None
    steady_rss_mib: float | None = None
    relist_p50_ms: float | None = None
    relist_p99_ms: float | None = None
    delete_all_s: float | None = None
    api_requests: int | None = None
    api_requests_per_pod: float | None = None
    error: str | None = None
    template: str = "plain"
    # Node requests by "verb resource[/subresource]", from the audit log.
    api_by_kind: dict[str, int] = field(default_factory=dict)
    # FailedMount events in the run's namespace, and the first few messages.
    failed_mount_events: int | None = None
    failed_mount_samples: list[str] = field(default_factory=list)
    profile_top: list[tuple[str, float]] | None = None  # (frame, share of samples)
    profile_inclusive: list[tuple[str, float]] | None = None  # the same, inclusive in ours
    # With --profile, py-spy also runs from the first creation until all pods
    # are Running: self time per leaf frame, and inclusive time per frame of ours.
    profile_startup_top: list[tuple[str, float]] | None = None
    profile_startup_inclusive: list[tuple[str, float]] | None = None
    # The kubelet's CPU from the first creation until all pods are Running.
    startup_cpu_cores: float | None = None
    # POD_START_HIST over the creation window (interpolated in coarse buckets).
    kubelet_start_p50_s: float | None = None
    kubelet_start_p99_s: float | None = None
    kube_api_qps: int = KUBE_API_QPS
    kube_api_burst: int = KUBE_API_BURST
    # Over the creation window: the kubelet's own histograms (rate limiter wait,
    # API round trips, pod start, status sync, CRI calls) and the audit log's
    # timing of its requests (see benches/density/evidence.py).
    evidence: dict[str, Any] = field(default_factory=dict)
    startup_latencies_s: list[float] = field(default_factory=list)
    runtime: str = "sim"
    # Load average (1, 5, 15 min) of the machine when the run began.
    load_avg: list[float] = field(default_factory=list)
    # containerd runs: containerd itself, and the sum over its shims (one per
    # pod), over the steady state; CPU also over the creation window.
    containerd_startup_cpu_cores: float | None = None
    containerd_cpu_cores: float | None = None
    containerd_rss_mib: float | None = None
    shims: int | None = None
    shims_cpu_cores: float | None = None
    shims_rss_mib: float | None = None  # sum of RSS (shared pages once per shim)
    shims_pss_mib: float | None = None  # sum of PSS
    # Simulated-runtime runs: the runtime process's CPU over the creation window
    # and the steady state (it answers every CRI call, in Python).
    sim_startup_cpu_cores: float | None = None
    sim_cpu_cores: float | None = None
    # The steady state in CPU_SAMPLE_S intervals (kubelet_perf.go's way).
    steady_cpu_samples: int = 0
    steady_cpu_p50_cores: float | None = None
    steady_cpu_p95_cores: float | None = None
    # Container stopped through the CRI -> the change seen on the watch (changes.py).
    container_change: dict[str, Any] = field(default_factory=dict)
    # The PLEG: "relist" or "evented"; the containerd flavour ("2", "1.6").
    pleg: str = "relist"
    containerd: str | None = None
    # Status latency (benches/density/kills.py): container killed -> the API
    # server's watch shows it, over `killed` kills.
    killed: int = 0
    status_latencies_s: list[float] = field(default_factory=list)
    status_latency_p50_s: float | None = None
    status_latency_p99_s: float | None = None
    # The relist's own duration while the kills were detected (relist runs only).
    kill_relist_p50_ms: float | None = None
    kill_relist_p99_ms: float | None = None
    # With Spec.cri_control: the two List calls of a relist sent straight to the
    # runtime from another process at the relist period in the same window;
    # exact percentiles, and the p99 read through the relist metric's buckets
    # as the kubelet's relist_p99_ms is.
    cri_list_p50_ms: float | None = None
    cri_list_p99_ms: float | None = None
    cri_list_p99_bucketed_ms: float | None = None
    # With Spec.scrapes (scrape.py): the kubelet with no pod yet, and what
    # metrics-server's scrapes of the stats endpoints cost it in the steady state.
    idle_cpu_cores: float | None = None
    idle_rss_mib: float | None = None
    scrape: dict[str, Any] = field(default_factory=dict)


def perf_percentile(samples: list[float], q: float) -> float | None:
    """kubelet_perf.go's percentile: the sorted sample at int(len * q) - 1."""
    i = int(len(samples) * q) - 1
    return sorted(samples)[i] if i >= 0 else None


def result_record(r: Result) -> dict[str, Any]:
    d = asdict(r)
    for k, v in list(d.items()):
        if isinstance(v, float):
            d[k] = round(v, 4)
    return d


def dump(results: list[Result], path: Path) -> None:
    path.write_text(json.dumps([result_record(r) for r in results], indent=1))
