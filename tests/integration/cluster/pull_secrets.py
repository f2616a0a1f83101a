"""What the image pull tests share: the credentials the private registry
(the private_registry fixture in conftest.py) wants, a pod that pulls on a
given node, and reading back the pod's waiting state and events."""

from __future__ import annotations

from typing import Any

from kubelet.testing.kubelets import KubeletProcess

USER, PASSWORD = "puller", "s3cret-pw"


def pull_pod(node: str, name: str, image: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": image, "command": ["sleep", "100000"]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "pull"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
            **spec,
        },
    }


def get_pod(k: KubeletProcess, name: str) -> dict[str, Any]:
    return dict(k.kubectl_json("get", "pod", name, "-n", "default"))


def waiting(k: KubeletProcess, name: str) -> dict[str, str]:
    st = get_pod(k, name)["status"].get("containerStatuses") or [{}]
    return dict((st[0].get("state") or {}).get("waiting") or {})


def events(k: KubeletProcess, name: str) -> list[tuple[str, str]]:
    evs = k.kubectl_json(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return [(e["reason"], e["message"]) for e in evs]
