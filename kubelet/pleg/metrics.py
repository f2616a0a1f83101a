"""The evented PLEG's stream metrics, by upstream's names and buckets
(pkg/kubelet/metrics), in the kubelet's registry."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from kubelet.metrics import DEF_BUCKETS, REGISTRY

EVENTED_PLEG_CONN = Counter(
    "kubelet_evented_pleg_connection_success_count_total",
    "GetContainerEvents streams opened to the runtime (the request went out).",
    registry=REGISTRY,
)
EVENTED_PLEG_CONN_ERR = Counter(
    "kubelet_evented_pleg_connection_error_count_total",
    "GetContainerEvents streams that could not be opened or ended (an error or the "
    "runtime closing it) while the kubelet still wanted events.",
    registry=REGISTRY,
)
EVENTED_PLEG_CONN_LATENCY = Histogram(
    "kubelet_evented_pleg_connection_latency_seconds",
    "Seconds from the runtime creating a container event to the kubelet reading it.",
    buckets=DEF_BUCKETS,
    registry=REGISTRY,
)
