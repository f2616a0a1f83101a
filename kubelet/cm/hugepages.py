"""Hugepages limits (hugetlb): the page sizes the kernel offers, the pod
cgroup's limits (ResourceConfigForPod's HugePageLimit) and a container's
(GetHugepageLimitsFromResources), with page sizes written as the hugetlb
files name them ("2MB", "1GB").

Every page size the node has gets a limit: what the pod (or container) asks
for, else 0, so a pod that asked for none can use none, as upstream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from kubelet.resourcehelper import HUGEPAGES_PREFIX, is_pod_level_resources_set, pod_requests
from kubelet.types import Container, Pod
from kubelet.util.quantity import to_bytes

log = logging.getLogger(__name__)

SYSFS_HUGEPAGES = "/sys/kernel/mm/hugepages"
# A limit that never binds (setHugePagesUnbounded on the QoS cgroups).
UNBOUNDED = 1 << 62
# Pod cgroup settings key per page size: "hugetlb.2MB".
KEY_PREFIX = "hugetlb."
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def unit_size(size: int) -> str:
    """HugePageUnitSizeFromByteSize: 2097152 -> "2MB"; ValueError when the
    size is not a whole number of a unit."""
    i = 0
    while size >= 1024 and size % 1024 == 0 and i < len(_UNITS) - 1:
        size //= 1024
        i += 1
    if i == 0 and size != 1:
        raise ValueError(f"size {size} is not a whole number of KB")
    return f"{size}{_UNITS[i]}"


def page_sizes(root: str = SYSFS_HUGEPAGES) -> tuple[str, ...]:
    """HugePageSizes: the kernel's page sizes ("hugepages-2048kB" -> "2MB");
    none when the directory is missing."""
    try:
        names = os.listdir(root)
    except OSError:
        return ()
    out = []
    for n in sorted(names):
        if n.startswith("hugepages-") and n.endswith("kB") and n[10:-2].isdigit():
            out.append(unit_size(int(n[10:-2]) * 1024))
    return tuple(out)


def _size_of(resource: str) -> str | None:
    """The page size a hugepages-<size> resource names, None if malformed."""
    if not resource.startswith(HUGEPAGES_PREFIX):
        return None
    try:
        return unit_size(to_bytes(resource[len(HUGEPAGES_PREFIX) :]))
    except ValueError:
        log.info("Ignoring malformed hugepages resource name %r", resource)
        return None


def pod_limits(pod: Pod, sizes: Sequence[str]) -> dict[str, int]:
    """The pod cgroup's hugetlb limits, keyed "hugetlb.<size>": the pod's
    hugepages requests (pod-level where set, else its containers'), 0 for
    the other page sizes."""
    out = {KEY_PREFIX + s: 0 for s in sizes}
    for name, amount in pod_requests(pod).items():
        size = _size_of(name)
        if size is not None:
            out[KEY_PREFIX + size] = out.get(KEY_PREFIX + size, 0) + amount
    return out


def container_limits(pod: Pod, c: Container, sizes: Sequence[str]) -> dict[str, int]:
    """A container's hugetlb limit per page size: its own hugepages limit,
    else the pod-level one, else 0."""
    out = dict.fromkeys(sizes, 0)
    wanted: dict[str, int] = {}
    if is_pod_level_resources_set(pod):
        _limits_into(wanted, (pod["spec"].get("resources") or {}).get("limits") or {})
    _limits_into(wanted, (c.get("resources") or {}).get("limits") or {})
    for size, limit in wanted.items():
        if size in out:
            out[size] = limit
    return out


def _limits_into(into: dict[str, int], limits: Mapping[str, object]) -> None:
    for name, q in limits.items():
        size = _size_of(name)
        if size is not None:
            into[size] = to_bytes(str(q))
