"""A pod's effective requests and limits (k8s.io/component-helpers/resource, and
pkg/api/v1/resource's GetResourceRequest), with pod-level resources (KEP-2837).

The one place where the pod's totals are worked out: admission's fit, the QoS
class, the pod cgroup, eviction ranking and the allocation manager all read
them from here. Amounts are integers in the unit the kubelet acts on: millicores
for cpu, bytes (or a count) for anything else.

Pod-level resources (spec.resources) replace the containers' aggregate for
each resource they name: only cpu, memory and hugepages-<size> count there,
anything else in spec.resources is left out, as upstream. A pod reaches these
functions only once admitted, and with the PodLevelResources gate off a pod
that sets them is refused at admission (lifecycle/features.py), as upstream;
so the gate needs no reading here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kubelet.core_v1 import Container, Pod, Quantity, ResourceList, ResourceRequirements
from kubelet.util.quantity import cpu_millis, to_bytes

Amounts = dict[str, int]

HUGEPAGES_PREFIX = "hugepages-"


def is_supported_pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith(HUGEPAGES_PREFIX)


def amount(name: str, quantity: Quantity) -> int:
    """A quantity in the unit the kubelet acts on (millicores for cpu)."""
    return cpu_millis(quantity) if name == "cpu" else to_bytes(quantity)


def amounts(rl: Mapping[str, Quantity] | None) -> Amounts:
    return {k: amount(k, v) for k, v in (rl or {}).items()}


def _pod_level_part(pod: Pod, part: str) -> Amounts:
    res: ResourceRequirements = pod["spec"].get("resources") or {}
    rl: ResourceList = (res.get("requests") if part == "requests" else res.get("limits")) or {}
    return {k: amount(k, v) for k, v in rl.items() if is_supported_pod_level_resource(k)}


def pod_level_requests(pod: Pod) -> Amounts:
    """spec.resources.requests, the supported resources only."""
    return _pod_level_part(pod, "requests")


def pod_level_limits(pod: Pod) -> Amounts:
    """spec.resources.limits, the supported resources only."""
    return _pod_level_part(pod, "limits")


def _names(pod: Pod, part: str) -> list[str]:
    res: ResourceRequirements = pod["spec"].get("resources") or {}
    rl = (res.get("requests") if part == "requests" else res.get("limits")) or {}
    return [k for k in rl if is_supported_pod_level_resource(k)]


def is_pod_level_requests_set(pod: Pod) -> bool:
    return bool(_names(pod, "requests"))


def is_pod_level_limits_set(pod: Pod) -> bool:
    return bool(_names(pod, "limits"))


def is_pod_level_resources_set(pod: Pod) -> bool:
    """IsPodLevelResourcesSet: spec.resources names cpu, memory or hugepages."""
    return is_pod_level_requests_set(pod) or is_pod_level_limits_set(pod)


def container_requests(c: Container) -> Amounts:
    """The container's requests; one left out is its limit, as the API server
    defaults it (a static pod is not defaulted by a server)."""
    res = c.get("resources") or {}
    return amounts({**(res.get("limits") or {}), **(res.get("requests") or {})})


def container_limits(c: Container) -> Amounts:
    return amounts((c.get("resources") or {}).get("limits"))


def _add(into: Amounts, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: Amounts, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if k not in into or v > into[k]:
            into[k] = v


def aggregate(
    pod: Pod,
    of: Callable[[Container], Amounts],
    each: Callable[[Amounts], None] | None = None,
) -> Amounts:
    """The containers' total (AggregateContainerRequests/Limits): regular
    containers and sidecars add up; an init container needs itself plus the
    sidecars started before it; the pod needs the larger of the two. `each`
    sees every container's contribution (an init container's with its
    sidecars), as upstream's ContainerFn."""
    spec = pod["spec"]
    total: Amounts = {}
    for c in spec.get("containers") or []:
        own = of(c)
        if each is not None:
            each(own)
        _add(total, own)
    sidecars: Amounts = {}
    init_max: Amounts = {}
    for c in spec.get("initContainers") or []:
        own = of(c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            own = dict(sidecars)
        else:
            _add(own, sidecars)
        if each is not None:
            each(own)
        _max(init_max, own)
    _max(total, init_max)
    return total


def aggregate_container_requests(pod: Pod) -> Amounts:
    return aggregate(pod, container_requests)


def aggregate_container_limits(pod: Pod) -> Amounts:
    return aggregate(pod, container_limits)


def pod_requests(pod: Pod, *, overhead: bool = True, containers: bool = True) -> Amounts:
    """PodRequests: the containers' aggregate, replaced per resource by the
    pod-level request, plus spec.overhead."""
    reqs = aggregate_container_requests(pod) if containers else {}
    reqs.update(pod_level_requests(pod))
    if overhead:
        _add(reqs, amounts(pod["spec"].get("overhead")))
    return reqs


def pod_limits(
    pod: Pod, *, overhead: bool = True, each: Callable[[Amounts], None] | None = None
) -> Amounts:
    """PodLimits: the containers' aggregate, replaced per resource by the
    pod-level limit; spec.overhead is added to the limits that are set."""
    limits = aggregate(pod, container_limits, each)
    limits.update(pod_level_limits(pod))
    if overhead:
        for k, v in amounts(pod["spec"].get("overhead")).items():
            if limits.get(k):
                limits[k] += v
    return limits


def resource_request(pod: Pod, name: str) -> int:
    """GetResourceRequest (eviction's ranking): with pod-level resources set,
    the pod-level request alone (a resource it leaves out counts as 0); the
    overhead is added to a request that is not zero."""
    set_at_pod = is_pod_level_resources_set(pod)
    req = pod_requests(pod, overhead=False, containers=not set_at_pod).get(name, 0)
    if req:
        req += amounts(pod["spec"].get("overhead")).get(name, 0)
    return req
