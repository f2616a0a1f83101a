"""What the node benchmarks read about a kubelet process: CPU and RSS from /proc,
and histograms from its Prometheus text."""

from __future__ import annotations

import os
import re

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as fh:
        parts = fh.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK_TCK


def proc_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def buckets(text: str, metric: str) -> list[tuple[float, float]]:
    """The cumulative (le, count) buckets of a histogram, whatever its other labels."""
    pat = re.escape(metric) + r'_bucket\{[^}]*le="([^"]+)"[^}]*\} ([0-9.e+]+)'
    return [(float(m.group(1)), float(m.group(2))) for m in re.finditer(pat, text)]


def hist_quantile(cumulative: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus-style quantile from cumulative buckets (linear within a bucket)."""
    if not cumulative or cumulative[-1][1] == 0:
        return None
    rank = q * cumulative[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in cumulative:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / max(c - prev_c, 1e-9))
        prev_le, prev_c = le, c
    return prev_le


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of raw samples (nearest rank)."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]
