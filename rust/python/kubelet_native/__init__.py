"""Native hot paths of the Python kubelet (Rust, built by maturin)."""

from kubelet_native._kubelet_native import *  # noqa: F403
from kubelet_native._kubelet_native import (
    BUILD_PROFILE,
    PodCacheCore,
    RateLimitingQueueCore,
    RelistDiffer,
    WorkQueueCore,
    __version__,
    container_ids,
    fnv32a,
)

__all__ = [
    "BUILD_PROFILE",
    "PodCacheCore",
    "RateLimitingQueueCore",
    "RelistDiffer",
    "WorkQueueCore",
    "__version__",
    "container_ids",
    "fnv32a",
]
