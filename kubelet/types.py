"""Small helpers on pods as API dicts (pkg/kubelet/types, pkg/apis/core/v1/helper/qos)."""

from __future__ import annotations

from typing import Any

from kubelet.util.quantity import parse_quantity

Pod = dict[str, Any]

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


def object_ref(pod: Pod, field_path: str | None = None) -> dict[str, str]:
    """The ObjectReference an event about this pod points at."""
    ref = {"kind": "Pod", "namespace": namespace(pod), "name": name(pod), "uid": uid(pod),
           "apiVersion": "v1"}  # fmt: skip
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def container_list(pod: Pod, cname: str) -> str | None:
    """Which list of the pod's spec holds the container named cname, if any
    (GetContainerSpec upstream)."""
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        if any(c.get("name") == cname for c in pod["spec"].get(kind) or []):
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


def restart_policy(pod: Pod) -> str:
    return str(pod["spec"].get("restartPolicy") or "Always")


def grace_period(pod: Pod) -> int:
    g = pod["spec"].get("terminationGracePeriodSeconds")
    return 30 if g is None else int(g)


def host_network(pod: Pod) -> bool:
    return bool(pod["spec"].get("hostNetwork"))


def qos_class(pod: Pod) -> str:
    """Guaranteed, Burstable or BestEffort (GetPodQOS) from cpu and memory requests/limits."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    containers = [*pod["spec"].get("initContainers", []), *pod["spec"].get("containers", [])]
    for c in containers:
        res = c.get("resources") or {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        for k, v in req.items():
            if parse_quantity(v) != 0:
                requests[k] = v
        for k, v in lim.items():
            if parse_quantity(v) != 0:
                limits[k] = v
        if set(lim) != {"cpu", "memory"}:
            guaranteed = False
        for k in ("cpu", "memory"):
            if k in req and k in lim and parse_quantity(req[k]) != parse_quantity(lim[k]):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and limits:
        return "Guaranteed"
    return "Burstable"
