"""Swap settings of a container (NodeSwap, GA; memorySwap.swapBehavior), as
upstream's kuberuntime_container_linux.go computes them:

- nothing at all when the node has no swap controller (cgroup v1
  memory.memsw.limit_in_bytes, cgroup v2 memory.swap.max in the kubelet's
  own cgroup);
- NoSwap (the default, and what LimitedSwap falls back to): on cgroup v2
  `memory.swap.max = 0` through the CRI's unified map; on cgroup v1 the
  memory+swap limit equals the memory limit (no swap beyond it);
- LimitedSwap, cgroup v2 only, for containers of Burstable pods that are not
  critical and whose memory request is set and differs from the limit:
  `memory.swap.max = request / node memory * node swap` (rounded down).

LimitedSwap on cgroup v1 is refused at start (cm.container_manager), as
upstream refuses it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from kubelet.cm.cgroup_manager import cgroup_mounts
from kubelet.cri.api import api_pb2 as pb
from kubelet.nodestatus.machine import machine_info
from kubelet.types import Container, Pod, is_critical, qos_class
from kubelet.util.quantity import to_bytes

log = logging.getLogger(__name__)

NO_SWAP = "NoSwap"
LIMITED_SWAP = "LimitedSwap"
BEHAVIORS = ("", NO_SWAP, LIMITED_SWAP)
SWAP_MAX = "memory.swap.max"  # cm.Cgroup2MaxSwapFilename


@dataclass(frozen=True)
class SwapConfig:
    behavior: str  # memorySwap.swapBehavior ("" is NoSwap)
    cgroup_v2: bool
    controller: bool  # the node has a swap controller (see swap_controller)
    node_memory: int  # bytes
    swap_capacity: int  # bytes


def swap_controller(cgroup_v2: bool, self_cgroup: str = "/proc/self/cgroup",
                    mount: str = "/sys/fs/cgroup") -> bool:  # fmt: skip
    """checkSwapControllerAvailability: v1 memory.memsw.limit_in_bytes at the
    memory root; v2 memory.swap.max in the kubelet's own cgroup (the root has none)."""
    if not cgroup_v2:
        return os.path.exists(f"{mount}/memory/memory.memsw.limit_in_bytes")
    try:
        with open(self_cgroup) as fh:
            own = next((line.split(":", 2)[2].strip() for line in fh if line.startswith("0::")), "")
    except (OSError, IndexError):
        return False
    return os.path.exists(os.path.join(mount, own.lstrip("/"), SWAP_MAX))


def node_swap_config(swap_behavior: str) -> SwapConfig:
    """memorySwap.swapBehavior with what this node's cgroups can do about swap."""
    try:
        v2 = cgroup_mounts()[0] == 2
    except OSError:
        v2 = True  # as the stats provider: no mountinfo, assume the unified tree
    m = machine_info()
    return SwapConfig(swap_behavior, v2, swap_controller(v2), m.memory_capacity, m.swap_capacity)


def container_swap_behavior(cfg: SwapConfig, pod: Pod, c: Container) -> str:
    """GetContainerSwapBehavior: LimitedSwap only where upstream allows it."""
    if cfg.behavior != LIMITED_SWAP or not cfg.controller or not cfg.cgroup_v2:
        return NO_SWAP
    if is_critical(pod) or qos_class(pod) != "Burstable":
        return NO_SWAP
    res = c.get("resources") or {}
    req = (res.get("requests") or {}).get("memory")
    lim = (res.get("limits") or {}).get("memory")
    req_b = to_bytes(req) if req is not None else 0
    lim_b = to_bytes(lim) if lim is not None else 0
    if (req_b == 0 and lim_b == 0) or req_b == lim_b:
        return NO_SWAP
    return LIMITED_SWAP


def limited_swap(request: int, node_memory: int, swap_capacity: int) -> int:
    """calcSwapForBurstablePods; ValueError where upstream returns an error."""
    if node_memory <= 0:
        raise ValueError("total node memory is 0")
    if request > node_memory:
        raise ValueError(
            f"container request {request} is larger than total node memory {node_memory}"
        )
    return int(request / node_memory * swap_capacity)


def configure(cfg: SwapConfig, out: pb.LinuxContainerResources, pod: Pod,
              c: Container) -> None:  # fmt: skip
    """configureContainerSwapResources: sets the swap fields of `out`, whose
    memory limit is already set."""
    if not cfg.controller:
        return
    swap = 0
    if container_swap_behavior(cfg, pod, c) == LIMITED_SWAP:
        req = ((c.get("resources") or {}).get("requests") or {}).get("memory")
        try:
            swap = limited_swap(
                to_bytes(req) if req is not None else 0, cfg.node_memory, cfg.swap_capacity
            )
        except ValueError as err:
            log.error("Cannot calculate swap allocation amount; disallowing swap: %s", err)
            swap = 0
    if cfg.cgroup_v2:
        out.unified[SWAP_MAX] = str(swap)
    else:
        # memory+swap = memory: nothing beyond the limit (ignored without one).
        out.memory_swap_limit_in_bytes = out.memory_limit_in_bytes
