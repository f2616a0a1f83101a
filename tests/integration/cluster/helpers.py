"""What the cluster tests share: our kubelet joined to the control plane with a
static pod of its own, and the pods they create."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess, cluster_kubelet

NODE = "py-cluster-node"

STATIC_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: static-web
  labels: {app: static-web}
spec:
  containers:
  - name: web
    image: busybox:1.36
    command: ["sh", "-c", "while true; do sleep 1; done"]
"""


def start_node(
    cp: ControlPlane,
    tmp: Path,
    endpoint: str,
    node_name: str = NODE,
    config: dict[str, Any] | None = None,
    **launch: Any,
) -> KubeletProcess:
    """cluster_kubelet with the static pod static-web in its manifest directory;
    `launch`: its flags, env or command."""
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "static-web.yaml").write_text(STATIC_POD)
    return cluster_kubelet(
        cp, tmp, endpoint, node_name, config=config, manifests=manifests, **launch
    )


def pod_manifest(name: str, labels: dict[str, str], command: str, **spec: Any) -> dict[str, Any]:
    """A pod in default bound to NODE whose busybox container runs `command`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}
            ],
            **spec,
        },
    }
