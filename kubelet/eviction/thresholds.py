"""Eviction thresholds (pkg/kubelet/eviction/helpers.go): parsing them from the
config, what each signal drives, the containerfs thresholds derived from the
disk layout (UpdateContainerFsThresholds), and which node-level reclaim runs
before pods are evicted for a disk signal (buildSignalToNodeReclaimFuncs)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction import signals as sig
from kubelet.eviction.signals import DiskLayout
from kubelet.util.duration import parse_duration
from kubelet.util.quantity import parse_quantity

log = logging.getLogger(__name__)

# signal -> the node condition it drives
CONDITIONS = {
    sig.MEMORY: "MemoryPressure",
    sig.ALLOCATABLE_MEMORY: "MemoryPressure",
    sig.NODEFS: "DiskPressure",
    sig.NODEFS_INODES: "DiskPressure",
    sig.IMAGEFS: "DiskPressure",
    sig.IMAGEFS_INODES: "DiskPressure",
    sig.CONTAINERFS: "DiskPressure",
    sig.CONTAINERFS_INODES: "DiskPressure",
    sig.PID: "PIDPressure",
}
# signal -> the resource the eviction message says the node was low on
RESOURCES = {
    sig.MEMORY: "memory",
    sig.ALLOCATABLE_MEMORY: "memory",
    sig.NODEFS: "ephemeral-storage",
    sig.IMAGEFS: "ephemeral-storage",
    sig.CONTAINERFS: "ephemeral-storage",
    sig.NODEFS_INODES: "inodes",
    sig.IMAGEFS_INODES: "inodes",
    sig.CONTAINERFS_INODES: "inodes",
    sig.PID: "pids",
}
MEMORY_SIGNALS = frozenset({sig.MEMORY, sig.ALLOCATABLE_MEMORY})
# The node's two ways to free disk without evicting a pod.
CONTAINER_GC, IMAGE_GC = "containers", "images"


@dataclass(frozen=True)
class Threshold:
    signal: str
    value: str  # "100Mi" or "10%"
    hard: bool
    grace: float = 0.0
    # evictionMinimumReclaim: once acted on, the threshold holds until this much
    # more than its value is available again.
    min_reclaim: str | None = None

    def limit(self, capacity: int, reclaiming: bool = False) -> float:
        out = _amount(self.value, capacity)
        if reclaiming and self.min_reclaim is not None:
            out += _amount(self.min_reclaim, capacity)
        return out

    @property
    def key(self) -> str:
        return self.signal + str(self.hard)


def _amount(value: str, capacity: int) -> float:
    if value.endswith("%"):
        return capacity * float(value[:-1]) / 100.0
    return float(parse_quantity(value))


def thresholds(config: KubeletConfiguration) -> list[Threshold]:
    """evictionHard then evictionSoft; with enforceNodeAllocatable `pods`, the
    hard memory.available threshold also holds allocatableMemory.available."""
    reclaim = config.eviction_minimum_reclaim or {}
    out = [
        Threshold(s, v, True, 0.0, reclaim.get(s)) for s, v in (config.eviction_hard or {}).items()
    ]
    for s, v in (config.eviction_soft or {}).items():
        grace = (config.eviction_soft_grace_period or {}).get(s, "0s")
        out.append(Threshold(s, v, False, parse_duration(grace), reclaim.get(s)))
    if "pods" in config.enforce_node_allocatable:
        out += [replace(t, signal=sig.ALLOCATABLE_MEMORY)
                for t in out if t.signal == sig.MEMORY and t.hard]  # fmt: skip
    return out


def with_container_fs(found: list[Threshold], layout: DiskLayout) -> list[Threshold]:
    """containerfs thresholds follow nodefs's (one filesystem, or containers
    on the root filesystem apart from the images) or imagefs's (containers and
    images together on their own filesystem). Configured containerfs
    thresholds are replaced, as upstream, and said so."""
    given = [t for t in found if t.signal in (sig.CONTAINERFS, sig.CONTAINERFS_INODES)]
    if given:
        log.warning(
            "eviction: containerfs thresholds are derived from the %s ones; ignoring %s",
            "imagefs" if layout.dedicated_image_fs and not layout.split else "nodefs",
            ", ".join(sorted({t.signal for t in given})),
        )
    out = [t for t in found if t not in given]
    if layout.dedicated_image_fs and not layout.split:
        source = {sig.IMAGEFS: sig.CONTAINERFS, sig.IMAGEFS_INODES: sig.CONTAINERFS_INODES}
    else:
        source = {sig.NODEFS: sig.CONTAINERFS, sig.NODEFS_INODES: sig.CONTAINERFS_INODES}
    return out + [replace(t, signal=source[t.signal]) for t in out if t.signal in source]


def reclaim_plan(layout: DiskLayout) -> dict[str, tuple[str, ...]]:
    """Per disk signal, the node-level reclaim to try before evicting a pod."""
    both: tuple[str, ...] = (CONTAINER_GC, IMAGE_GC)
    node: tuple[str, ...]
    image: tuple[str, ...]
    if layout.split:
        # Images alone on imagefs; containers' layers on the root filesystem.
        node, image = (CONTAINER_GC,), (IMAGE_GC,)
    elif layout.dedicated_image_fs:
        # Images and containers on imagefs; nodefs holds logs and volumes only.
        node, image = (), both
    else:
        node = image = both
    container = node if layout.split else image
    return {
        sig.NODEFS: node,
        sig.NODEFS_INODES: node,
        sig.IMAGEFS: image,
        sig.IMAGEFS_INODES: image,
        sig.CONTAINERFS: container,
        sig.CONTAINERFS_INODES: container,
    }


# What of a pod's local storage ranks it under a disk signal.
ALL, VOLUMES, CONTAINERS = "all", "volumes", "containers"


def disk_rank(layout: DiskLayout, signal: str) -> str:
    """buildSignalToRankFunc's disk part. One filesystem (or containers beside
    the kubelet): everything the pod stores. Images and containers on their
    own filesystem: nodefs by the pod's volumes, imagefs and containerfs by its
    containers' writable layers (their logs go with the containers here: the
    measure does not part them)."""
    if not layout.dedicated_image_fs or layout.split:
        return ALL
    return VOLUMES if signal in (sig.NODEFS, sig.NODEFS_INODES) else CONTAINERS
