"""The certificate managers' metrics, with upstream's names, in the kubelet's registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kubelet.metrics import REGISTRY

CERT_CLIENT_TTL = Gauge(
    "kubelet_certificate_manager_client_ttl_seconds",
    "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in "
    "seconds until certificate expiry (negative if already expired). If client certificate "
    "is invalid or unused, the value will be +INF.",
    registry=REGISTRY,
)
CERT_CLIENT_TTL.set(float("inf"))
CERT_CLIENT_RENEW_ERRORS = Counter(
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "Counter of certificate renewal errors.",
    registry=REGISTRY,
)
CERT_SERVER_TTL = Gauge(
    "kubelet_certificate_manager_server_ttl_seconds",
    "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value "
    "is in seconds until certificate expiry (negative if already expired). If serving "
    "certificate is invalid or unused, the value will be +INF.",
    registry=REGISTRY,
)
CERT_SERVER_TTL.set(float("inf"))
CERT_SERVER_RENEW_ERRORS = Counter(
    "kubelet_server_expiration_renew_errors",
    "Counter of certificate renewal errors.",
    registry=REGISTRY,
)
CERT_SERVER_ROTATION_SECONDS = Histogram(
    "kubelet_certificate_manager_server_rotation_seconds",
    "Histogram of the number of seconds the previous certificate lived before being rotated.",
    buckets=(60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000),
    registry=REGISTRY,
)
