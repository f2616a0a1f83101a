"""Downward API values of a pod (pkg/fieldpath, pkg/apis/core/pods
ConvertDownwardAPIFieldLabel and pkg/api/v1/resource upstream).

Shared by the container environment (`valueFrom.fieldRef` /
`resourceFieldRef`) and the downwardAPI volume plugin. Errors are ValueError
carrying upstream's message, which reaches the user as the container's
CreateContainerConfigError message or a volume setup event.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from decimal import ROUND_CEILING, Decimal

from kubelet.types import (
    Container,
    ObjectFieldSelector,
    Pod,
    Quantity,
    ResourceFieldSelector,
    ResourceList,
)
from kubelet.util.quantity import parse_quantity
from kubelet.util.validation import is_qualified_name

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", '"': '\\"', "\\": "\\\\"}  # fmt: skip


def _go_quote(s: str) -> str:
    """Go's strconv.Quote: printable characters kept, the rest escaped."""
    out = ['"']
    for ch in s:
        esc = _GO_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable():
            out.append(ch)
        else:
            cp = ord(ch)
            if cp < 0x20 or cp == 0x7F:
                out.append(f"\\x{cp:02x}")
            elif 0xD800 <= cp <= 0xDFFF:  # not a valid rune: Go writes U+FFFD
                out.append("\ufffd")
            elif cp < 0x10000:
                out.append(f"\\u{cp:04x}")
            else:
                out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def format_map(m: Mapping[str, str]) -> str:
    """Labels or annotations as sorted `key="value"` lines (FormatMap)."""
    return "\n".join(f"{k}={_go_quote(m[k])}" for k in sorted(m))


def split_maybe_subscripted_path(path: str) -> tuple[str, str, bool]:
    """`metadata.labels['k']` -> ("metadata.labels", "k", True); otherwise (path, "", False)."""
    if not path.endswith("']"):
        return path, "", False
    head, sep, subscript = path[:-2].partition("['")
    if not sep or not head:
        return path, "", False
    return head, subscript, True


def extract_field_path(pod: Pod, path: str) -> str:
    """A metadata field of the pod as a string (ExtractFieldPathAsString).

    This is what the downwardAPI volume resolves; the environment goes through
    pod_field_value, which also knows spec and status fields.
    """
    meta = pod["metadata"]
    head, subscript, subscripted = split_maybe_subscripted_path(path)
    if subscripted:
        if head == "metadata.annotations":
            # Annotation keys are checked case-insensitively, label keys not.
            errs = is_qualified_name(subscript.lower())
            if errs:
                raise ValueError(f"invalid key subscript in {path}: {';'.join(errs)}")
            return str((meta.get("annotations") or {}).get(subscript, ""))
        if head == "metadata.labels":
            errs = is_qualified_name(subscript)
            if errs:
                raise ValueError(f"invalid key subscript in {path}: {';'.join(errs)}")
            return str((meta.get("labels") or {}).get(subscript, ""))
        raise ValueError(f'fieldPath "{path}" does not support subscript')
    if path == "metadata.annotations":
        return format_map(meta.get("annotations") or {})
    if path == "metadata.labels":
        return format_map(meta.get("labels") or {})
    if path == "metadata.name":
        return meta.get("name") or ""
    if path == "metadata.namespace":
        return meta.get("namespace") or ""
    if path == "metadata.uid":
        return meta.get("uid") or ""
    raise ValueError(f"unsupported fieldPath: {path}")


# Field labels the API accepts in a pod's downward API references.
_FIELD_LABELS = frozenset({
    "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
    "metadata.uid", "spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName",
    "spec.schedulerName", "status.phase", "status.hostIP", "status.hostIPs",
    "status.podIP", "status.podIPs",
})  # fmt: skip


def convert_downward_api_field_label(version: str, label: str) -> str:
    """The internal field path for a v1 field label (ConvertDownwardAPIFieldLabel)."""
    if version != "v1":
        raise ValueError(f"unsupported pod version: {version}")
    head, _, subscripted = split_maybe_subscripted_path(label)
    if subscripted:
        if head in ("metadata.annotations", "metadata.labels"):
            return label
        raise ValueError(f"field label does not support subscript: {label}")
    if label in _FIELD_LABELS:
        return label
    if label == "spec.host":  # old v1 clients
        return "spec.nodeName"
    raise ValueError(f"field label not supported: {label}")


def sort_pod_ips(pod_ips: Sequence[str], node_ips: Sequence[str]) -> list[str]:
    """At most one IP per family, the node's primary family first (sortPodIPs):
    `status.podIP` is the first of these."""
    primary_v6 = bool(node_ips) and ipaddress.ip_address(node_ips[0]).version == 6
    parsed = []
    for s in pod_ips:
        try:
            parsed.append(ipaddress.ip_address(s.strip()))
        except ValueError:
            continue
    out: list[str] = []
    for want_v6 in (primary_v6, not primary_v6):
        for ip in parsed:
            if (ip.version == 6) == want_v6:
                out.append(str(ip))
                break
    return out


def pod_field_value(
    pod: Pod,
    field_ref: ObjectFieldSelector,
    host_ips: Sequence[str],
    pod_ips: Sequence[str],
) -> str:
    """`valueFrom.fieldRef` of an env var (podFieldSelectorRuntimeValue).

    host_ips: the node's host IPs (InternalIP first, at most one per family);
    pod_ips: already in sort_pod_ips order.
    """
    path = convert_downward_api_field_label(
        field_ref.get("apiVersion") or "v1", field_ref.get("fieldPath") or ""
    )
    spec = pod["spec"]
    if path == "spec.nodeName":
        return str(spec.get("nodeName") or "")
    if path == "spec.serviceAccountName":
        return str(spec.get("serviceAccountName") or "")
    if path in ("status.hostIP", "status.hostIPs"):
        if not host_ips:
            raise ValueError("host IP unknown; known addresses: []")
        return host_ips[0] if path == "status.hostIP" else ",".join(host_ips)
    if path == "status.podIP":
        return pod_ips[0] if pod_ips else ""
    if path == "status.podIPs":
        return ",".join(pod_ips)
    return extract_field_path(pod, path)


# --- resources ------------------------------------------------------------

_MERGED_FROM_ALLOCATABLE = ("cpu", "memory", "ephemeral-storage")
_HUGEPAGES_PREFIX = "hugepages-"


def _quantity(v: Quantity | None) -> Decimal:
    return parse_quantity(v) if v is not None else Decimal(0)


def _value(q: Decimal) -> int:
    """Quantity.Value(): whole units, rounded up."""
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def _milli_value(q: Decimal) -> int:
    return int((q * 1000).to_integral_value(rounding=ROUND_CEILING))


def merge_container_resource_limits(
    container: Container, allocatable: Mapping[str, Quantity]
) -> ResourceList:
    """The container's limits with cpu, memory and ephemeral-storage taken from
    allocatable where unset or zero (MergeContainerResourceLimits). Hugepages are
    never defaulted: they are not overcommitted, so a limit is always set."""
    limits = dict((container.get("resources") or {}).get("limits") or {})
    for name in _MERGED_FROM_ALLOCATABLE:
        q = limits.get(name)
        if (q is None or _quantity(q) == 0) and name in allocatable:
            limits[name] = allocatable[name]
    return limits


def extract_container_resource_value(
    ref: ResourceFieldSelector, limits: Mapping[str, Quantity], requests: Mapping[str, Quantity]
) -> str:
    """A container resource divided by the divisor, rounded up
    (ExtractContainerResourceValue); a missing resource reads as 0."""
    divisor = _quantity(ref.get("divisor"))
    if divisor == 0:
        divisor = Decimal(1)
    resource = str(ref.get("resource") or "")
    kind, _, name = resource.partition(".")
    if kind in ("limits", "requests") and (
        name in ("cpu", "memory", "ephemeral-storage") or name.startswith(_HUGEPAGES_PREFIX)
    ):
        q = _quantity((limits if kind == "limits" else requests).get(name))
        # Float division as upstream, so huge values round the same way.
        if name == "cpu":
            n = math.ceil(float(_milli_value(q)) / float(_milli_value(divisor)))
        else:
            n = math.ceil(float(_value(q)) / float(_value(divisor)))
        return str(n)
    raise ValueError(f"unsupported container resource : {resource}")


def find_container(pod: Pod, container_name: str) -> Container:
    """A container or init container by name (findContainerInPod)."""
    spec = pod["spec"]
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if c.get("name") == container_name:
            return c
    raise ValueError(f"container {container_name} not found")


def extract_resource_value(
    ref: ResourceFieldSelector,
    pod: Pod,
    container_name: str,
    node_allocatable: Mapping[str, str],
) -> str:
    """`resourceFieldRef` of a downwardAPI volume item: the named container's
    resource, limits defaulted from node allocatable
    (ExtractResourceValueByContainerNameAndNodeAllocatable)."""
    container = find_container(pod, container_name)
    limits = merge_container_resource_limits(container, node_allocatable)
    requests = (container.get("resources") or {}).get("requests") or {}
    return extract_container_resource_value(ref, limits, requests)


def pod_level_allocatable(pod: Pod, node_allocatable: Mapping[str, str]) -> ResourceList:
    """Node allocatable with the pod-level limits (spec.resources.limits) of cpu and
    memory put in place of the node's, the default for containers without their own
    limits in the environment (defaultPodLimitsForDownwardAPI, PodLevelResources)."""
    allocatable: ResourceList = dict(node_allocatable)
    pod_limits = (pod["spec"].get("resources") or {}).get("limits") or {}
    for name in ("cpu", "memory"):
        q = pod_limits.get(name)
        if q is not None and _quantity(q) != 0 and name in allocatable:
            allocatable[name] = q
    return allocatable
