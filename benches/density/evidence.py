"""Where a kubelet's startup latency goes, from evidence it leaves: its own
Prometheus histograms over the creation window, and the API server's audit log
of its requests (when each was received and answered).

Used by the density harness for every run; `python -m benches.density.evidence
RUN_DIR` prints the same from a kept run directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benches.procmetrics import hist_quantile

# Histograms looked at in both kubelets' /metrics (absent ones are skipped).
HISTOGRAMS = (
    "rest_client_rate_limiter_duration_seconds",  # client-side QPS/burst wait
    "rest_client_request_duration_seconds",  # API round trip seen by the client
    "kubelet_pod_start_sli_duration_seconds",  # seen -> running, pulls excluded
    "kubelet_pod_start_duration_seconds",  # first seen -> containers running
    "kubelet_pod_status_sync_duration_seconds",  # status change -> written
    "kubelet_pod_worker_duration_seconds",  # one sync of one pod
    "kubelet_runtime_operations_duration_seconds",  # CRI calls by operation
)


def histograms(text: str) -> dict[str, dict[str, Any]]:
    """{metric: {label set: {"buckets": [(le, cum)], "sum": s, "count": n}}}
    for the HISTOGRAMS in one scrape; le is dropped from the label set key."""
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in HISTOGRAMS:
            continue
        series: dict[str, Any] = {}
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            h = series.setdefault(key, {"buckets": [], "sum": 0.0, "count": 0.0})
            if s.name.endswith("_bucket"):
                h["buckets"].append((float(s.labels["le"]), float(s.value)))
            elif s.name.endswith("_sum"):
                h["sum"] = float(s.value)
            elif s.name.endswith("_count"):
                h["count"] = float(s.value)
        out[fam.name] = series
    return out


def window(before: str, after: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per histogram and label set, what happened between two scrapes: count,
    mean and p50/p99 (interpolated in the buckets). Label sets with no
    observations in the window are left out."""
    b, a = histograms(before), histograms(after)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, series in a.items():
        for key, h in series.items():
            prev = b.get(name, {}).get(key, {"buckets": [], "sum": 0.0, "count": 0.0})
            n = h["count"] - prev["count"]
            if n <= 0:
                continue
            pb = dict(prev["buckets"])
            cum = [(le, c - pb.get(le, 0.0)) for le, c in sorted(h["buckets"])]
            out.setdefault(name, {})[key or "-"] = {
                "count": n,
                "mean_s": round((h["sum"] - prev["sum"]) / n, 5),
                "p50_s": _r(hist_quantile(cum, 0.5)),
                "p99_s": _r(hist_quantile(cum, 0.99)),
            }
    return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 5)


def _ts(s: str) -> float:
    # "2026-11-23T16:40:01.123456Z" -> seconds since the epoch
    from datetime import datetime

    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def audit_timing(audit_log: Path, user: str, since: float, until: float) -> dict[str, Any]:
    """How `user`'s requests were spread over [since, until] (epoch seconds):
    per "verb resource", the count, the server-side latency (received ->
    answered) p50/p99, the most and the mean requests of that kind in flight
    at the server at once, and the rate. A writer that sends one request at a
    time shows at most 1 in flight, whatever the server's latency."""
    reqs: dict[str, list[tuple[float, float]]] = {}
    needle = f'"username":"{user}"'
    with open(audit_log, errors="replace") as fh:
        for line in fh:
            if needle not in line:
                continue
            try:
                ev = json.loads(line)
                t0 = _ts(ev["requestReceivedTimestamp"])
                t1 = _ts(ev["stageTimestamp"])
            except (ValueError, KeyError):
                continue
            if t0 < since or t0 > until:
                continue
            ref = ev.get("objectRef") or {}
            res = ref.get("resource") or "?"
            if ref.get("subresource"):
                res += "/" + ref["subresource"]
            if ev.get("verb") == "watch":
                continue
            reqs.setdefault(f"{ev.get('verb', '?')} {res}", []).append((t0, t1))
    out: dict[str, Any] = {}
    for kind, spans in sorted(reqs.items(), key=lambda kv: -len(kv[1])):
        spans.sort()
        lat = sorted(t1 - t0 for t0, t1 in spans)
        edges = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
        cur = peak = 0
        busy = 0.0
        last = edges[0][0]
        for t, d in edges:
            busy += cur * (t - last)
            last = t
            cur += d
            peak = max(peak, cur)
        # From the first arrival to the last answer (one request has a span too).
        span = max(max(t1 for _, t1 in spans) - spans[0][0], 1e-3)
        out[kind] = {
            "count": len(spans),
            "server_p50_ms": round(lat[len(lat) // 2] * 1000, 2),
            "server_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2),
            "peak_in_flight": peak,
            "mean_in_flight": round(busy / span, 3),
            "per_second": round(len(spans) / span, 1),
            "first_to_last_s": round(span, 2),
        }
    return out


def brief(ev: dict[str, Any]) -> str:
    """A few lines for the console."""
    lines = []
    for name in HISTOGRAMS:
        for key, v in (ev.get("histograms", {}).get(name) or {}).items():
            if name == "kubelet_runtime_operations_duration_seconds" and v["count"] < 50:
                continue
            lines.append(
                f"  {name}{{{key}}}: n={v['count']:.0f} mean={v['mean_s']:.4f}s "
                f"p50={v['p50_s']} p99={v['p99_s']}"
            )
    for kind, v in list((ev.get("audit") or {}).items())[:6]:
        lines.append(
            f"  audit {kind}: n={v['count']} server p50/p99 {v['server_p50_ms']}/"
            f"{v['server_p99_ms']} ms, in flight peak {v['peak_in_flight']} mean "
            f"{v['mean_in_flight']}, {v['per_second']}/s over {v['first_to_last_s']} s"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    for d in argv:
        p = Path(d)
        before, after = p / "metrics-before-create.txt", p / "metrics-all-running.txt"
        print(d)
        print(brief({"histograms": window(before.read_text(), after.read_text())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
