"""kubelet_http_requests_total, kubelet_http_requests_duration_seconds and
kubelet_http_inflight_requests, labelled as upstream's server labels them:
method (a known HTTP verb or "other"), path (the first path segment, two for
/metrics/..., or "other" for what the server does not serve), server_type
("readwrite" on the authenticated port, "readonly" on the read-only one) and
long_running. Upstream's long-running set is exec, attach, portforward and
debug; its bucket for port-forward is spelled "portForward", so that one counts
as not long-running there, and here too (the same series for the same request).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Counter, Gauge, Histogram

from kubelet.metrics import REGISTRY

_LABELS = ["method", "path", "server_type", "long_running"]
HTTP_REQUESTS = Counter(
    "kubelet_http_requests", "HTTP requests received, by bucket", _LABELS, registry=REGISTRY
)
HTTP_REQUESTS_DURATION = Histogram(
    "kubelet_http_requests_duration_seconds",
    "Seconds to serve HTTP requests, by bucket",
    _LABELS,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
HTTP_INFLIGHT = Gauge(
    "kubelet_http_inflight_requests", "HTTP requests being served", _LABELS, registry=REGISTRY
)

METHODS = frozenset(("OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT"))
LONG_RUNNING = frozenset(("exec", "attach", "portforward", "debug"))
READ_ONLY_PATHS = frozenset(
    ("healthz", "pods", "stats", "metrics", "metrics/cadvisor", "metrics/probes",
     "metrics/resource")
)  # fmt: skip
READ_WRITE_PATHS = READ_ONLY_PATHS | {
    "run", "exec", "attach", "portForward", "containerLogs", "configz", "runningpods",
    "checkpoint", "pprof", "logs", "debug", "statusz", "flagz",
}  # fmt: skip


def path_bucket(path: str, known: frozenset[str]) -> str:
    parts = path.lstrip("/").split("/", 2)
    root = f"{parts[0]}/{parts[1]}" if parts[0] == "metrics" and len(parts) > 1 else parts[0]
    return root if root in known else "other"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def http_metrics(server_type: str, known: frozenset[str]) -> Middleware:
    """A middleware counting and timing every request, first in the chain (so a
    request refused by authentication is counted too, as upstream counts it)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        method = request.method if request.method in METHODS else "other"
        path = path_bucket(request.path, known)
        labels = (method, path, server_type, "true" if path in LONG_RUNNING else "false")
        HTTP_REQUESTS.labels(*labels).inc()
        inflight = HTTP_INFLIGHT.labels(*labels)
        inflight.inc()
        start = time.perf_counter()
        try:
            return await handler(request)
        finally:
            inflight.dec()
            HTTP_REQUESTS_DURATION.labels(*labels).observe(time.perf_counter() - start)

    return middleware
