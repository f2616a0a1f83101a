"""kubelet_image_pull_duration_seconds by upstream's name, buckets and size
label (pkg/kubelet/metrics), in the kubelet's registry."""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import Histogram

from kubelet.metrics import REGISTRY

IMAGE_PULL_DURATION = Histogram(
    "kubelet_image_pull_duration_seconds",
    "Seconds from asking for an image pull to having it, waiting for a pull slot "
    "included, by the pulled image's size.",
    ["image_size_in_bytes"],
    buckets=(1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700,
             3600),
    registry=REGISTRY,
)  # fmt: skip

_MB, _GB = 1 << 20, 1 << 30
# Lower bounds (exclusive) of upstream's size labels.
_SIZE_BOUNDS = (0, 10 * _MB, 100 * _MB, 500 * _MB, _GB, 5 * _GB, 10 * _GB, 20 * _GB, 30 * _GB,
                40 * _GB, 60 * _GB, 100 * _GB)  # fmt: skip
_SIZE_LABELS = ("0-10MB", "10MB-100MB", "100MB-500MB", "500MB-1GB", "1GB-5GB", "5GB-10GB",
                "10GB-20GB", "20GB-30GB", "30GB-40GB", "40GB-60GB", "60GB-100GB", "GT100GB")  # fmt: skip


def image_size_bucket(size: int) -> str:
    """The label of a size in bytes: N/A when unknown (0), else the range above
    whose lower bound it is (10 MiB exactly is still 0-10MB, as upstream)."""
    if size <= 0:
        return "N/A"
    return _SIZE_LABELS[bisect_left(_SIZE_BOUNDS, size) - 1]
