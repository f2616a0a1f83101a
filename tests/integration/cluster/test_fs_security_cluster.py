"""API volumes are read-only in the container on a real cluster: our `kubelet`
command on a private containerd, a real configMap and secret, and the
service-account token volume the API server's admission adds. A container
writing into any of them gets EROFS, whatever its volumeMount's readOnly says."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from tests.integration.cluster.test_cluster_kubelet import ClusterKubelet, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-secfs-node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterKubelet]:
    tmp = tmp_path_factory.mktemp("secfs-kubelet")
    k = ClusterKubelet(control_plane, tmp, containerd, node_name=NODE)  # type: ignore[arg-type]
    try:
        wait_for("the node to be Ready", lambda: _ready(k), timeout=120)
        yield k
    finally:
        k.stop()
        # A stopped kubelet leaves its pods' tmpfs volumes mounted (as upstream).
        _unmount_under(str(tmp))
        print(f"kubelet log: {k.log}")


def _unmount_under(base: str) -> None:
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    for point in sorted((p for p in points if p.startswith(base + "/")), reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _ready(k: ClusterKubelet) -> bool:
    if k.proc.poll() is not None:
        raise RuntimeError(f"kubelet exited {k.proc.returncode}: {k.log.read_text()[-3000:]}")
    n = k.kubectl_json("get", "node", NODE)
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])
    )


def apply(k: ClusterKubelet, *objects: dict[str, Any]) -> None:
    path = k.tmp / f"objects-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    k.cp.kubectl("apply", "-f", str(path))


def test_writes_into_configmap_secret_and_token_volumes_fail_with_erofs(
    node: ClusterKubelet,
) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "secfs-cm", "namespace": "default"},
        "data": {"key": "value"},
    }
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "secfs-secret", "namespace": "default"},
              "stringData": {"pw": "hunter2"}}  # fmt: skip
    dirs = ["/cm", "/secret", SA_DIR]
    script = (
        f"for d in {' '.join(dirs)}; do "
        "touch $d/planted 2>>/dev/termination-log; "
        "ln -s /etc $d/evil 2>>/dev/termination-log; "
        "done; "
        f"rm -f {SA_DIR}/token 2>>/dev/termination-log; "
        f"test -s {SA_DIR}/token && echo token-still-there >>/dev/termination-log; exit 7"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "secfs-erofs", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", script],
                    "volumeMounts": [
                        {"name": "cm", "mountPath": "/cm", "readOnly": False},
                        {"name": "secret", "mountPath": "/secret", "readOnly": False},
                    ],
                }
            ],
            "volumes": [
                {"name": "cm", "configMap": {"name": "secfs-cm"}},
                {"name": "secret", "secret": {"secretName": "secfs-secret"}},
            ],
        },
    }
    apply(node, cm, secret, pod)

    def terminated() -> dict[str, Any] | None:
        p = node.kubectl_json("get", "pod", "secfs-erofs", "-n", "default")
        for cs in p["status"].get("containerStatuses", []):
            return cs["state"].get("terminated")
        return None

    term = wait_for("the container to finish", terminated, timeout=180)
    assert term["exitCode"] == 7, term
    lines = term["message"].splitlines()
    assert lines[-1] == "token-still-there", lines
    errors = lines[:-1]
    assert len(errors) == 7 and all("Read-only file system" in e for e in errors), errors
    for d in dirs:
        assert any(f"{d}/planted" in e for e in errors), (d, errors)
    node.cp.kubectl("delete", "pod", "secfs-erofs", "-n", "default", "--timeout=120s")
