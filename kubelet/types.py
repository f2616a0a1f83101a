"""Small helpers on pods (pkg/kubelet/types, pkg/apis/core/v1/helper/qos), and
the typed API objects of kubelet/core_v1/, re-exported: a JSON document
becomes one of those at the wire (the pod sources, the API client) through
`as_pod`.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal, cast

from kubelet.core_v1 import *  # noqa: F403  (the API types, re-exported)
from kubelet.core_v1 import (
    ConfigMap,
    Container,
    Node,
    ObjectReference,
    Pod,
    PodSpec,
    Quantity,
    Secret,
)
from kubelet.util.quantity import parse_quantity

# What JSON decodes to before it is known to be one of the above.
JSONObject = dict[str, Any]


def as_pod(doc: Mapping[str, Any]) -> Pod:
    """A decoded pod document as a Pod: the one place where JSON becomes typed.
    The sources check what they rely on (metadata, spec, containers) first."""
    return cast(Pod, doc)


def as_node(doc: Mapping[str, Any]) -> Node:
    """A decoded Node document (the node watch's JSON) as a Node."""
    return cast(Node, doc)


def as_secret(doc: Mapping[str, Any]) -> Secret:
    """A Secret as the object cache read it from the API."""
    return cast(Secret, doc)


def as_configmap(doc: Mapping[str, Any]) -> ConfigMap:
    """A ConfigMap as the object cache read it from the API."""
    return cast(ConfigMap, doc)


ContainerKind = Literal["containers", "initContainers", "ephemeralContainers"]
CONTAINER_KINDS: tuple[ContainerKind, ...] = ("containers", "initContainers", "ephemeralContainers")


def containers_of(spec: PodSpec, kind: ContainerKind) -> list[Container]:
    if kind == "containers":
        return spec.get("containers") or []
    if kind == "initContainers":
        return spec.get("initContainers") or []
    return list(spec.get("ephemeralContainers") or [])


def all_containers(pod: Pod) -> list[Container]:
    """containers, initContainers and ephemeralContainers, in that order."""
    return [c for kind in CONTAINER_KINDS for c in containers_of(pod["spec"], kind)]


# Phases no pod ever leaves.
TERMINAL_PHASES = ("Succeeded", "Failed")

CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_SEEN = "kubernetes.io/config.seen"
CONFIG_MIRROR = "kubernetes.io/config.mirror"

FILE_SOURCE = "file"
HTTP_SOURCE = "http"
API_SOURCE = "api"


def uid(pod: Pod) -> str:
    return str(pod["metadata"]["uid"])


def name(pod: Pod) -> str:
    return str(pod["metadata"]["name"])


def namespace(pod: Pod) -> str:
    return str(pod["metadata"].get("namespace") or "default")


def object_ref(pod: Pod, field_path: str | None = None) -> ObjectReference:
    """The ObjectReference an event about this pod points at."""
    ref: ObjectReference = {"kind": "Pod", "namespace": namespace(pod), "name": name(pod),
                            "uid": uid(pod), "apiVersion": "v1"}  # fmt: skip
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def container_list(pod: Pod, cname: str) -> ContainerKind | None:
    """Which list of the pod's spec holds the container named cname, if any
    (GetContainerSpec upstream)."""
    for kind in CONTAINER_KINDS:
        if any(c.get("name") == cname for c in containers_of(pod["spec"], kind)):
            return kind
    return None


def container_field_path(pod: Pod, cname: str) -> str:
    """spec.containers{c}, spec.initContainers{c}, ...: where events about a container point."""
    return f"spec.{container_list(pod, cname) or 'containers'}{{{cname}}}"


def full_name(pod: Pod) -> str:
    """name_namespace, the kubelet's key for a pod across UIDs."""
    return f"{name(pod)}_{namespace(pod)}"


def pod_annotations(pod: Pod) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def is_static(pod: Pod) -> bool:
    return pod_annotations(pod).get(CONFIG_SOURCE, API_SOURCE) != API_SOURCE


# scheduling.SystemCriticalPriority: system-cluster-critical and above.
SYSTEM_CRITICAL_PRIORITY = 2 * 1_000_000_000


def is_critical(pod: Pod) -> bool:
    """IsCriticalPod: static (and so mirror) pods and system-critical priorities."""
    priority = (pod.get("spec") or {}).get("priority")
    return is_static(pod) or (priority is not None and int(priority) >= SYSTEM_CRITICAL_PRIORITY)


def is_sidecar(c: Container) -> bool:
    """An init container with restartPolicy Always (a restartable init container)."""
    return c.get("restartPolicy") == "Always"


def restart_policy(pod: Pod) -> str:
    return str(pod["spec"].get("restartPolicy") or "Always")


def grace_period(pod: Pod) -> int:
    g = pod["spec"].get("terminationGracePeriodSeconds")
    return 30 if g is None else int(g)


def host_network(pod: Pod) -> bool:
    return bool(pod["spec"].get("hostNetwork"))


def _positive(rl: Mapping[str, Quantity] | None) -> dict[str, Decimal]:
    """The cpu and memory entries above zero (QoS ignores every other resource)."""
    out: dict[str, Decimal] = {}
    for k, v in (rl or {}).items():
        if k in ("cpu", "memory") and (q := parse_quantity(v)) > 0:
            out[k] = q
    return out


def _sum_into(into: dict[str, Decimal], add: Mapping[str, Decimal]) -> None:
    for k, v in add.items():
        into[k] = into.get(k, Decimal(0)) + v


def qos_class(pod: Pod) -> str:
    """Guaranteed, Burstable or BestEffort (ComputePodQOS) from cpu and memory
    requests/limits: those of spec.resources when the pod sets that field
    (pod-level resources; the containers' are then not read), else the
    containers' sums. Guaranteed needs limits on cpu and memory (on the pod,
    or on every container) and requests equal to them."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    spec = pod["spec"]
    pod_level = spec.get("resources")
    if pod_level is not None:
        requests = _positive(pod_level.get("requests"))
        limits = _positive(pod_level.get("limits"))
        if pod_level.get("limits") and set(limits) != {"cpu", "memory"}:
            guaranteed = False
    else:
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            res = c.get("resources") or {}
            # A request left out is the limit, as the API server defaults it.
            lim = _positive(res.get("limits"))
            req = _positive({**(res.get("limits") or {}), **(res.get("requests") or {})})
            _sum_into(requests, req)
            _sum_into(limits, lim)
            if set(lim) != {"cpu", "memory"}:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(k) == v for k, v in requests.items()):
        if len(requests) == len(limits):
            return "Guaranteed"
    return "Burstable"
