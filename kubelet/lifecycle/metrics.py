"""The lifecycle hooks' counters, by upstream's names (pkg/kubelet/metrics), in
the kubelet's registry."""

from __future__ import annotations

from prometheus_client import Counter

from kubelet.metrics import REGISTRY

LIFECYCLE_HANDLER_HTTP_FALLBACKS = Counter(
    "kubelet_lifecycle_handler_http_fallbacks_total",
    "httpGet hooks with scheme HTTPS that got a plain-HTTP answer and then succeeded over HTTP.",
    registry=REGISTRY,
)
SLEEP_ACTION_TERMINATED_EARLY = Counter(
    "kubelet_sleep_action_terminated_early_total",
    "Sleep hooks cut short before their seconds were up (the grace period ran out, "
    "or the kubelet stopped).",
    registry=REGISTRY,
)
