"""Node allocatable: what is reserved off the node's capacity, and the limits
that enforce it on cgroups (pkg/kubelet/cm/node_container_manager_linux.go).

Resource lists here are plain ints in base units: `cpu` in millicores, memory,
ephemeral-storage and hugepages-* in bytes, `pid` in processes.

- The reservation is systemReserved + kubeReserved + the hard eviction
  thresholds on memory.available and nodefs.available; it may not exceed the
  capacity (validateNodeAllocatable, fatal at start).
- enforceNodeAllocatable `pods`: the kubepods cgroup gets capacity minus
  systemReserved and kubeReserved (eviction thresholds are not subtracted: the
  eviction manager acts before the limit bites), as CPU shares, memory limit
  and pids.max. Without `pods` it gets the whole capacity.
- `system-reserved` / `kube-reserved`: systemReservedCgroup / kubeReservedCgroup,
  which must exist already, get those reservations as their limits;
  `*-compressible` sets only the CPU shares.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubelet.cm.cgroup_manager import CgroupError, CgroupManager, milli_cpu_to_shares
from kubelet.util.quantity import cpu_millis, parse_quantity

if TYPE_CHECKING:
    from kubelet.apis.config import KubeletConfiguration

ResourceList = dict[str, int]

PODS = "pods"
SYSTEM_RESERVED = "system-reserved"
SYSTEM_RESERVED_COMPRESSIBLE = "system-reserved-compressible"
KUBE_RESERVED = "kube-reserved"
KUBE_RESERVED_COMPRESSIBLE = "kube-reserved-compressible"
NONE = "none"
ENFORCEMENT_KEYS = (
    PODS,
    SYSTEM_RESERVED,
    SYSTEM_RESERVED_COMPRESSIBLE,
    KUBE_RESERVED,
    KUBE_RESERVED_COMPRESSIBLE,
    NONE,
)


def parse_resource_list(m: Mapping[str, str]) -> ResourceList:
    """kubeReserved / systemReserved as ints (cpu in millicores); raises ValueError."""
    out: ResourceList = {}
    for name, text in m.items():
        out[name] = cpu_millis(text) if name == "cpu" else int(parse_quantity(text))
    return out


def _float32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def threshold_quantity(value: str, capacity: int) -> int:
    """An eviction threshold ("100Mi" or "10%") as an amount of `capacity`; a
    percentage as Go computes it (parsed to float32, /100 in float32, times the
    capacity in float64, truncated)."""
    text = value.strip()
    if text.endswith("%"):
        pct = _float32(_float32(float(text[:-1])) / 100)
        return int(float(capacity) * pct)
    return int(parse_quantity(text))


def hard_eviction_reservation(hard: Mapping[str, str], capacity: ResourceList) -> ResourceList:
    out: ResourceList = {}
    for signal, resource in (
        ("memory.available", "memory"),
        ("nodefs.available", "ephemeral-storage"),
    ):
        if signal in hard:
            out[resource] = threshold_quantity(hard[signal], capacity.get(resource, 0))
    return out


def cgroup_config(rl: ResourceList | None, compressible_only: bool = False) -> dict[str, int]:
    """The cgroup settings a resource list stands for (getCgroupConfigInternal)."""
    if rl is None:
        return {}
    out: dict[str, int] = {}
    if "cpu" in rl:
        out["cpu_shares"] = milli_cpu_to_shares(rl["cpu"])
    if compressible_only:
        return out
    if "memory" in rl:
        out["memory_limit"] = rl["memory"]
    if "pid" in rl:
        out["pids_limit"] = rl["pid"]
    return out


@dataclass(frozen=True)
class NodeAllocatableConfig:
    enforce: frozenset[str] = frozenset({PODS})
    system_reserved: ResourceList = field(default_factory=dict)
    kube_reserved: ResourceList = field(default_factory=dict)
    system_reserved_cgroup: str = ""
    kube_reserved_cgroup: str = ""
    hard_eviction: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: KubeletConfiguration) -> NodeAllocatableConfig:
        """Raises ValueError when kubeReserved/systemReserved do not parse."""
        return cls(
            enforce=frozenset(cfg.enforce_node_allocatable) - {NONE},
            system_reserved=parse_resource_list(cfg.system_reserved),
            kube_reserved=parse_resource_list(cfg.kube_reserved),
            system_reserved_cgroup=cfg.system_reserved_cgroup,
            kube_reserved_cgroup=cfg.kube_reserved_cgroup,
            hard_eviction=dict(cfg.eviction_hard),
        )


def allocatable_absolute(cfg: NodeAllocatableConfig, capacity: ResourceList) -> ResourceList:
    """Capacity minus the system and kube reservations, never below zero."""
    return {
        k: max(0, v - cfg.system_reserved.get(k, 0) - cfg.kube_reserved.get(k, 0))
        for k, v in capacity.items()
    }


def reservation(cfg: NodeAllocatableConfig, capacity: ResourceList) -> ResourceList:
    """What is kept from scheduling: reservations plus hard eviction thresholds."""
    evict = hard_eviction_reservation(cfg.hard_eviction, capacity)
    out: ResourceList = {}
    for k in capacity:
        v = cfg.system_reserved.get(k, 0) + cfg.kube_reserved.get(k, 0) + evict.get(k, 0)
        if v:
            out[k] = v
    return out


def validate_node_allocatable(cfg: NodeAllocatableConfig, capacity: ResourceList) -> str | None:
    """The startup error when more is reserved than the node has, else None."""
    problems = [
        f"Resource {k!r} has a reservation of {_fmt(k, v)} but capacity of "
        f"{_fmt(k, capacity[k])}. Expected capacity >= reservation."
        for k, v in sorted(reservation(cfg, capacity).items())
        if capacity[k] - v < 0
    ]
    if not problems:
        return None
    return "invalid Node Allocatable configuration. " + " ".join(problems)


def _fmt(resource: str, v: int) -> str:
    return f"{v}m" if resource == "cpu" else str(v)


def kubepods_config(
    cfg: NodeAllocatableConfig, internal_capacity: ResourceList, cgroups_per_qos: bool
) -> dict[str, int]:
    """The kubepods cgroup's settings: node allocatable when `pods` is enforced,
    else the whole capacity (the default CPU shares would starve the pods)."""
    rl = internal_capacity
    if cgroups_per_qos and PODS in cfg.enforce:
        rl = allocatable_absolute(cfg, internal_capacity)
    return cgroup_config(rl)


class EnforcementError(Exception):
    pass


# (type, reason, message) about the Node.
NodeEvent = Callable[[str, str, str], None]


def enforce_reserved_cgroups(
    cfg: NodeAllocatableConfig, mgr: CgroupManager, node_event: NodeEvent
) -> None:
    """Limits on systemReservedCgroup / kubeReservedCgroup as enforceNodeAllocatable
    asks; raises EnforcementError (after its Warning event) on the first failure."""
    for key, cgroup, rl, compressible, what in (
        (SYSTEM_RESERVED, cfg.system_reserved_cgroup, cfg.system_reserved, False, "System"),
        (KUBE_RESERVED, cfg.kube_reserved_cgroup, cfg.kube_reserved, False, "Kube"),
        (SYSTEM_RESERVED_COMPRESSIBLE, cfg.system_reserved_cgroup, cfg.system_reserved, True,
         "System"),
        (KUBE_RESERVED_COMPRESSIBLE, cfg.kube_reserved_cgroup, cfg.kube_reserved, True, "Kube"),
    ):  # fmt: skip
        if key not in cfg.enforce:
            continue
        label = f"{what} Reserved{' Compressible' if compressible else ''}"
        try:
            mgr.validate(cgroup)
            mgr.update(cgroup, cgroup_config(rl, compressible))
        except (OSError, CgroupError) as err:
            message = f"Failed to enforce {label} Cgroup Limits on {cgroup!r}: {err}"
            node_event("Warning", "FailedNodeAllocatableEnforcement", message)
            raise EnforcementError(message) from err
        node_event(
            "Normal",
            "NodeAllocatableEnforced",
            f"Updated limits on {what.lower()} reserved cgroup {cgroup}",
        )
