"""What a node-pressure eviction says (evictionMessage in upstream's helpers.go):
the message on the pod's status and its Evicted event, and the event's
annotations that tools (and upstream's e2e tests) read to learn what was
starved and which containers used more of it than they asked for.

Pure: the figures come in, text goes out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubelet.core_v1 import Pod, ResourceList
from kubelet.eviction.signals import Observation
from kubelet.eviction.thresholds import RESOURCES, Threshold
from kubelet.util.quantity import (
    BINARY_SI,
    DECIMAL_SI,
    format_quantity,
    parse_quantity,
    quantity_format,
)

# The event annotation keys, as upstream names them.
STARVED_RESOURCE = "starved_resource"
OFFENDING_CONTAINERS = "offending_containers"
OFFENDING_CONTAINERS_USAGE = "offending_containers_usage"
OFFENDING_POD = "offending_pod"
OFFENDING_POD_USAGE = "offending_pod_usage"

# Resources whose figures are bytes (printed with binary suffixes): also the
# ones a container requests and is measured against (inodes and PIDs are not).
_BYTES = ("memory", "ephemeral-storage")


@dataclass(frozen=True)
class PodUsage:
    """The evicted pod's use of the starved resource: its containers' (name ->
    memory working set, or writable layer plus logs) and, for memory, the pod's
    own working set (None: not measured)."""

    containers: Mapping[str, int] = field(default_factory=dict)
    pod: int | None = None


def _quantity(value: int, resource: str) -> str:
    return format_quantity(value, BINARY_SI if resource in _BYTES else DECIMAL_SI)


def _as_written(text: str | int | float) -> str:
    """A quantity from the config or a spec as the API prints it ("1024Mi" -> "1Gi")."""
    return format_quantity(parse_quantity(text), quantity_format(text))


def threshold_met(t: Threshold, o: Observation) -> str:
    """The threshold and what was available when it was met; a percentage
    threshold shows as the amount it came to (upstream's GetThresholdQuantity)."""
    resource = RESOURCES.get(t.signal, t.signal)
    if t.value.endswith("%"):
        quantity = format_quantity(int(o.capacity * float(t.value[:-1]) / 100.0), BINARY_SI)
    else:
        quantity = _as_written(t.value)
    return f"Threshold quantity: {quantity}, available: {_quantity(o.available, resource)}. "


def _request(requests: ResourceList | None, resource: str) -> tuple[int, str]:
    text = (requests or {}).get(resource)
    if text is None:
        return 0, "0"
    return int(parse_quantity(text)), _as_written(text)


def eviction_message(
    t: Threshold, o: Observation, pod: Pod, usage: PodUsage | None
) -> tuple[str, dict[str, str]]:
    """The message and the event annotations for evicting `pod` because `t`
    was met. Without figures for the pod (usage None) the annotations name the
    starved resource alone; upstream then gives none, which helps nobody."""
    resource = RESOURCES.get(t.signal, t.signal)
    message = f"The node was low on resource: {resource}. {threshold_met(t, o)}"
    annotations = {STARVED_RESOURCE: resource}
    if usage is None:
        return message, annotations
    spec = pod.get("spec") or {}
    pod_request = ((spec.get("resources") or {}).get("requests") or {}).get(resource)
    if resource == "memory" and pod_request is not None and usage.pod is not None:
        used = _quantity(usage.pod, resource)
        message += (
            f"Pod {(pod.get('metadata') or {}).get('name', '')} was using {used}, request is "
            f"{_as_written(pod_request)}, has larger consumption of {resource}. "
        )
        annotations[OFFENDING_POD] = (pod.get("metadata") or {}).get("name", "")
        annotations[OFFENDING_POD_USAGE] = used
    offenders: list[str] = []
    figures: list[str] = []
    if resource in _BYTES:
        # Ephemeral containers request nothing and are never blamed, as upstream.
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            used_bytes = usage.containers.get(c["name"])
            if used_bytes is None:
                continue
            req, req_text = _request((c.get("resources") or {}).get("requests"), resource)
            if used_bytes > req:
                used = _quantity(used_bytes, resource)
                message += (
                    f"Container {c['name']} was using {used}, request is {req_text}, "
                    f"has larger consumption of {resource}. "
                )
                offenders.append(c["name"])
                figures.append(used)
    annotations[OFFENDING_CONTAINERS] = ",".join(offenders)
    annotations[OFFENDING_CONTAINERS_USAGE] = ",".join(figures)
    return message, annotations
