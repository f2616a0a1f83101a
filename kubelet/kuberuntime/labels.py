"""Labels and annotations the kubelet puts on sandboxes and containers, so a
restarted kubelet (or the Go kubelet) recognises what it created
(pkg/kubelet/kuberuntime/labels.go)."""

from __future__ import annotations

import orjson

from kubelet.types import Container, Pod, grace_period, name, namespace, uid

POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"
POD_TERMINATION_GRACE = "io.kubernetes.pod.terminationGracePeriod"
CONTAINER_HASH = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT = "io.kubernetes.container.restartCount"
CONTAINER_TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
CONTAINER_TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
CONTAINER_PRE_STOP = "io.kubernetes.container.preStopHandler"
CONTAINER_PORTS = "io.kubernetes.container.ports"


def sandbox_labels(pod: Pod) -> dict[str, str]:
    labels = dict(pod["metadata"].get("labels") or {})
    labels.update({POD_NAME: name(pod), POD_NAMESPACE: namespace(pod), POD_UID: uid(pod)})
    return labels


def sandbox_annotations(pod: Pod) -> dict[str, str]:
    return {k: str(v) for k, v in (pod["metadata"].get("annotations") or {}).items()}


def container_labels(pod: Pod, container: Container) -> dict[str, str]:
    return {
        POD_NAME: name(pod),
        POD_NAMESPACE: namespace(pod),
        POD_UID: uid(pod),
        CONTAINER_NAME: container["name"],
    }


def container_annotations(
    pod: Pod, container: Container, restart_count: int, container_hash: str
) -> dict[str, str]:
    ann = {
        CONTAINER_HASH: container_hash,
        CONTAINER_RESTART_COUNT: str(restart_count),
        CONTAINER_TERMINATION_MESSAGE_PATH: container.get(
            "terminationMessagePath", "/dev/termination-log"
        ),
        CONTAINER_TERMINATION_MESSAGE_POLICY: container.get("terminationMessagePolicy", "File"),
        POD_TERMINATION_GRACE: str(grace_period(pod)),
    }
    if container.get("ports"):
        ann[CONTAINER_PORTS] = orjson.dumps(container["ports"]).decode()
    if (container.get("lifecycle") or {}).get("preStop"):
        ann[CONTAINER_PRE_STOP] = orjson.dumps(container["lifecycle"]["preStop"]).decode()
    return ann


def container_hash(container: Container) -> str:
    """Stable hash of the container spec minus resources (those can change in
    place), so an edited spec restarts the container and nothing else does."""
    import zlib

    spec = {k: v for k, v in container.items() if k != "resources"}
    return f"{zlib.crc32(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)):08x}"
