"""Which pod generation a status reports (PodObservedGenerationTracking, beta and on
in v1.34; pkg/api/v1/pod CalculatePod{Status,Condition}ObservedGeneration).

The kubelet writes `status.observedGeneration` and each of its conditions'
`observedGeneration` from the `metadata.generation` of the pod it acted on.
With the gate off it still writes them where the API copy already carries one:
the API server keeps a set value when an update leaves it out, so clearing it
would never converge. 0 means "leave the field out" (the API's omitempty).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubelet.features import Feature
from kubelet.types import Pod

GATE = Feature.PodObservedGenerationTracking


def generation(pod: Pod) -> int:
    """The pod's metadata.generation (0 when unset, as for static pods from a file)."""
    try:
        return int((pod.get("metadata") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def status_observed_generation(pod: Pod, tracking: bool) -> int:
    """status.observedGeneration for a status computed from `pod`."""
    api = (pod.get("status") or {}).get("observedGeneration") or 0
    return generation(pod) if tracking or api else 0


def condition_observed_generation(
    old_conditions: Iterable[Mapping[str, Any]], gen: int, ctype: str, tracking: bool
) -> int:
    """A condition's observedGeneration: the pod's generation when tracking is on,
    or when the previous status' condition of that type already carries one."""
    if tracking:
        return gen
    for c in old_conditions:
        if c.get("type") == ctype and c.get("observedGeneration"):
            return gen
    return 0
