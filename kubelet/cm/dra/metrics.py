"""The DRA manager's metrics by upstream's names, labels and buckets
(pkg/kubelet/metrics: dra_*), in the kubelet's registry."""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from prometheus_client import Gauge, Histogram

from kubelet.metrics import REGISTRY

# ExponentialBucketsRange(0.1, 40, 15): up to the drivers' 45 s call timeout.
_FACTOR = (40 / 0.1) ** (1 / 14)
BUCKETS = tuple(0.1 * _FACTOR**i for i in range(15))
ANY_DRIVER = "<any>"

OPERATIONS = Histogram(
    "dra_operations_duration_seconds",
    "Latency histogram in seconds for the duration of handling all ResourceClaims referenced "
    "by a pod when the pod starts or stops. Identified by the name of the operation "
    "(PrepareResources or UnprepareResources) and separated by the success of the operation. "
    "The number of failed operations is provided through the histogram's overall count.",
    ["operation_name", "is_error"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
GRPC_OPERATIONS = Histogram(
    "dra_grpc_operations_duration_seconds",
    "Duration in seconds of the DRA gRPC operations",
    ["driver_name", "method_name", "grpc_status_code"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
CLAIMS_IN_USE = Gauge(
    "dra_resource_claims_in_use",
    "The number of ResourceClaims that are currently in use on the node, by driver name "
    "(driver_name label value) and across all drivers (special value <any> for driver_name). "
    "Note that the sum of all by-driver counts is not the total number of in-use "
    "ResourceClaims because the same ResourceClaim might use devices from different drivers. "
    "Instead, use the count for the <any> driver_name.",
    ["driver_name"],
    registry=REGISTRY,
)


def code_name(code: grpc.StatusCode) -> str:
    """A status code as Go's codes.Code.String() writes it (DeadlineExceeded)."""
    if code == grpc.StatusCode.OK:
        return "OK"
    if code == grpc.StatusCode.CANCELLED:
        return "Canceled"
    return "".join(w.capitalize() for w in code.name.split("_"))


def set_claims_in_use(counts: Mapping[str, int]) -> None:
    """The prepared claims per driver and in all (ANY_DRIVER); drivers with
    none drop out, as upstream's collector reports only those it counts."""
    CLAIMS_IN_USE.clear()
    for driver, n in counts.items():
        CLAIMS_IN_USE.labels(driver).set(n)
