"""client-go's rest_client_* metrics for the kubelet's API clients, by upstream's
names, labels and buckets (component-base/metrics/prometheus/restclient): request
latency and client-side rate-limiter wait by verb and host, requests by status
code, method and host ("<error>" when no answer came), request and response
sizes by verb and host. host is the API server's host:port."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from kubelet.metrics import REGISTRY

_LATENCY = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
_SIZE = tuple(float(x) for x in (64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1 << 20,
                                 4 << 20, 16 << 20))  # fmt: skip

REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds", "API request latency, by verb and host",
    ["verb", "host"], buckets=_LATENCY, registry=REGISTRY,
)  # fmt: skip
RATE_LIMITER_DURATION = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Seconds an API request waited for the client-side rate limiter, by verb and host",
    ["verb", "host"], buckets=_LATENCY, registry=REGISTRY,
)  # fmt: skip
REQUESTS = Counter(
    "rest_client_requests", "API requests, by status code, method and host",
    ["code", "method", "host"], registry=REGISTRY,
)  # fmt: skip
REQUEST_SIZE = Histogram(
    "rest_client_request_size_bytes", "API request body sizes, by verb and host",
    ["verb", "host"], buckets=_SIZE, registry=REGISTRY,
)  # fmt: skip
RESPONSE_SIZE = Histogram(
    "rest_client_response_size_bytes", "API response body sizes, by verb and host",
    ["verb", "host"], buckets=_SIZE, registry=REGISTRY,
)  # fmt: skip
ERROR_CODE = "<error>"
