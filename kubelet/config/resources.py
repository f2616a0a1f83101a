"""Pod-level resources of a static pod: checked and defaulted here, since no API
server sees the manifest (validatePodResources and SetDefaults_Pod upstream).

Only cpu, memory and hugepages-<size> may be set on the pod; requests may not
exceed limits (hugepages: must equal them); the containers' aggregate
requests may not exceed the pod's, nor one container's limit the pod's.
Upstream's kubelet validates a static pod without these checks and leaves
names it does not support to the helpers to skip; this kubelet refuses such a
manifest instead, with the error the API server would give.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubelet.resourcehelper import (
    HUGEPAGES_PREFIX,
    aggregate,
    amounts,
    is_supported_pod_level_resource,
)
from kubelet.types import as_pod
from kubelet.util.quantity import parse_quantity

SUPPORTED = '"cpu", "hugepages-", "memory"'


class ResourceError(ValueError):
    """A pod-level resources error, worded as the API server's."""


def _quantities(res: dict[str, Any], part: str) -> dict[str, Decimal]:
    rl = res.get(part)
    if rl is None:
        return {}
    if not isinstance(rl, dict):
        raise ResourceError(f"spec.resources.{part}: must be an object")
    out: dict[str, Decimal] = {}
    for k, v in rl.items():
        path = f"spec.resources.{part}[{k}]"
        if not is_supported_pod_level_resource(k):
            raise ResourceError(f'{path}: Unsupported value: "{k}": supported values: {SUPPORTED}')
        try:
            q = parse_quantity(v)
        except ValueError as err:
            raise ResourceError(f"{path}: Invalid value: {v!r}: {err}") from err
        if q < 0:
            raise ResourceError(f"{path}: Invalid value: {v!r}: must be greater than or equal to 0")
        out[k] = q
    return out


def validate_pod_resources(spec: dict[str, Any]) -> None:
    """Raise ResourceError for the first problem with spec.resources."""
    res = spec.get("resources")
    if res is None:
        return
    if not isinstance(res, dict):
        raise ResourceError("spec.resources: must be an object")
    if (spec.get("os") or {}).get("name") == "windows":
        raise ResourceError("spec.resources: Forbidden: may not be set for a windows pod")
    if res.get("claims") is not None:
        raise ResourceError(
            "spec.resources.claims: Forbidden: claims may not be set for Resources at pod-level"
        )
    reqs, lims = _quantities(res, "requests"), _quantities(res, "limits")
    for k, q in reqs.items():
        path, lim = f"spec.resources.requests[{k}]", lims.get(k)
        if k.startswith(HUGEPAGES_PREFIX) and lim != q:
            raise ResourceError(f"{path}: Invalid value: must be equal to {k} limit")
        if lim is not None and q > lim:
            raise ResourceError(f"{path}: Invalid value: must be less than or equal to {k} limit")
    names = set(reqs) | set(lims)
    if names and not names & {"cpu", "memory"}:
        raise ResourceError("spec.resources: Forbidden: HugePages require cpu or memory")
    _check_consistency(spec, reqs, lims)


def _check_consistency(
    spec: dict[str, Any], reqs: dict[str, Decimal], lims: dict[str, Decimal]
) -> None:
    pod = as_pod({"spec": spec})
    aggr = aggregate(pod, _own_requests)
    for k, v in aggr.items():
        if k in reqs and v > amounts({k: str(reqs[k])})[k]:
            raise ResourceError(
                f"spec.resources.requests[{k}]: Invalid value: must be greater than or "
                "equal to aggregate container requests"
            )
    aggr_lims = aggregate(pod, _own_limits)
    for k, v in aggr_lims.items():
        if k.startswith(HUGEPAGES_PREFIX) and k in lims and v > amounts({k: str(lims[k])})[k]:
            raise ResourceError(
                f"spec.resources.limits[{k}]: Invalid value: must be greater than or "
                "equal to aggregate container limits"
            )
    for c in spec.get("containers") or []:
        for k, v in _own_limits(c).items():
            if k in lims and v > amounts({k: str(lims[k])})[k]:
                raise ResourceError(
                    f"spec.containers[{c.get('name')}].resources.limits[{k}]: Invalid value: "
                    f"must be less than or equal to pod limits of {spec['resources']['limits'][k]}"
                )


def _own_requests(c: Any) -> dict[str, int]:
    return amounts((c.get("resources") or {}).get("requests"))


def _own_limits(c: Any) -> dict[str, int]:
    return amounts((c.get("resources") or {}).get("limits"))


def default_pod_resources(spec: dict[str, Any]) -> None:
    """SetDefaults_Pod's pod-level part, once the containers' requests are
    defaulted from their limits: pod-level hugepages limits from the
    containers' (unless the pod requests that size); then, when the pod sets
    limits, each request it leaves out from the containers' aggregate request
    (cpu, memory) or else from its own limit."""
    res = spec.get("resources")
    if not res or not (res.get("limits") or res.get("requests")):
        return
    pod = as_pod({"spec": spec})
    lims = dict(res.get("limits") or {})
    reqs = dict(res.get("requests") or {})
    for k, v in aggregate(pod, _own_limits).items():
        if k.startswith(HUGEPAGES_PREFIX) and k not in reqs and k not in lims:
            lims[k] = str(v)
    if lims:
        res["limits"] = lims
        for k, v in aggregate(pod, _own_requests).items():
            if k not in reqs and k in ("cpu", "memory"):
                reqs[k] = f"{v}m" if k == "cpu" else str(v)
        for k, q in lims.items():
            if k not in reqs and is_supported_pod_level_resource(k):
                reqs[k] = q
        if reqs:
            res["requests"] = reqs
