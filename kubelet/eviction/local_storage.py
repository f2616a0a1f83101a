"""Local ephemeral storage limits (eviction_manager.go localStorageEviction and
helpers.go upstream), the pure part: which pods have a limit to enforce, and
whether a pod's measured usage breaks one, with upstream's messages.

In upstream's order, the first broken limit wins:
1. an emptyDir's `sizeLimit` (any medium: the volume's measured bytes);
2. the pod's total (containers' writable layers and logs, local ephemeral
   volumes, logs and etc-hosts) against the sum of its containers' limits
   (PodLimits: regular containers and sidecars summed, at least any init
   container with the sidecars started before it, plus overhead);
3. a regular container's writable layer and logs against its own limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from kubelet.stats.ephemeral import PodStorage
from kubelet.types import Container, Pod
from kubelet.util.quantity import format_quantity, parse_quantity, quantity_format

RESOURCE = "ephemeral-storage"
# immediateEvictionGracePeriodSeconds: a pod over its own limit gets 1 s.
IMMEDIATE_GRACE = 1
EMPTYDIR_MESSAGE = 'Usage of EmptyDir volume "{}" exceeds the limit "{}". '
POD_MESSAGE = "Pod ephemeral local storage usage exceeds the total limit of containers {}. "
CONTAINER_MESSAGE = 'Container {} exceeded its local ephemeral storage limit "{}". '


@dataclass(frozen=True)
class Quantity:
    """A quantity and the format it prints in (the first operand's, as Go's Add)."""

    value: Decimal
    fmt: str

    @staticmethod
    def of(text: str | int | float) -> Quantity:
        return Quantity(parse_quantity(text), quantity_format(text))

    def __str__(self) -> str:
        return format_quantity(self.value, self.fmt)


def _limit(c: Container) -> str | None:
    limits = (c.get("resources") or {}).get("limits") or {}
    v = limits.get(RESOURCE)
    return None if v is None else str(v)


def _add(a: Quantity | None, b: Quantity) -> Quantity:
    return b if a is None else Quantity(a.value + b.value, a.fmt)


def _max(a: Quantity | None, b: Quantity | None) -> Quantity | None:
    if a is None or (b is not None and b.value > a.value):
        return b
    return a


def pod_ephemeral_limit(pod: Pod) -> Quantity | None:
    """PodLimits for ephemeral-storage, or None when no container sets one."""
    spec = pod.get("spec") or {}
    total: Quantity | None = None
    for c in spec.get("containers") or []:
        lim = _limit(c)
        if lim is not None:
            total = _add(total, Quantity.of(lim))
    sidecars: Quantity | None = None
    init_max: Quantity | None = None
    for c in spec.get("initContainers") or []:
        lim = _limit(c)
        q = Quantity.of(lim) if lim is not None else None
        if c.get("restartPolicy") == "Always":
            if q is not None:
                total = _add(total, q)
                sidecars = _add(sidecars, q)
            use = sidecars
        else:
            use = q if sidecars is None else (sidecars if q is None else _add(q, sidecars))
        init_max = _max(init_max, use)
    total = _max(total, init_max)
    overhead = (spec.get("overhead") or {}).get(RESOURCE)
    if total is not None and total.value and overhead is not None:
        total = _add(total, Quantity.of(overhead))
    return total


def has_limits(pod: Pod) -> bool:
    """Whether the pod has anything localStorageEviction would hold it to."""
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir")
        if isinstance(ed, dict) and ed.get("sizeLimit") is not None:
            return True
    containers: Iterable[Container] = [
        *(spec.get("containers") or []),
        *(spec.get("initContainers") or []),
    ]
    return any(_limit(c) is not None for c in containers)


def violation(pod: Pod, usage: PodStorage) -> str | None:
    """The eviction message for the first limit the pod's usage breaks, or None."""
    found = violated(pod, usage)
    return None if found is None else found[1]


# The kubelet_evictions signal labels of upstream's local storage evictions.
SIGNAL_EMPTYDIR = "emptydirfs.limit"
SIGNAL_POD = "ephemeralpodfs.limit"
SIGNAL_CONTAINER = "ephemeralcontainerfs.limit"


def violated(pod: Pod, usage: PodStorage) -> tuple[str, str] | None:
    """(signal, eviction message) of the first limit the pod's usage breaks, or None."""
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir")
        size = ed.get("sizeLimit") if isinstance(ed, dict) else None
        used = usage.volumes.get(v.get("name", ""))
        if size is None or used is None:
            continue
        q = Quantity.of(size)
        if q.value > 0 and used > q.value:
            return SIGNAL_EMPTYDIR, EMPTYDIR_MESSAGE.format(v["name"], q)
    total = pod_ephemeral_limit(pod)
    if total is not None and usage.total > total.value:
        return SIGNAL_POD, POD_MESSAGE.format(total)
    for c in spec.get("containers") or []:
        lim = _limit(c)
        used = usage.containers.get(c.get("name", ""))
        if lim is None or used is None:
            continue
        q = Quantity.of(lim)
        if q.value != 0 and used > q.value:
            return SIGNAL_CONTAINER, CONTAINER_MESSAGE.format(c["name"], q)
    return None
