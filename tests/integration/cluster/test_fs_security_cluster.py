"""API volumes are read-only in the container on a real cluster: our `kubelet`
command on a private containerd, a real configMap and secret, and the
service-account token volume the API server's admission adds. A container
writing into any of them gets EROFS, whatever its volumeMount's readOnly says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.process import unmount_under
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import start_node

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-secfs-node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("secfs-kubelet")
    k = start_node(control_plane, tmp, containerd.endpoint, node_name=NODE)
    try:
        wait_for("the node to be Ready", k.ready, timeout=120)
        yield k
    finally:
        k.stop()
        # A stopped kubelet leaves its pods' tmpfs volumes mounted (as upstream).
        unmount_under(tmp)
        print(f"kubelet log: {k.log}")


def test_writes_into_configmap_secret_and_token_volumes_fail_with_erofs(
    node: KubeletProcess,
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
    node.apply(cm, secret, pod)

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
    node.kubectl("delete", "pod", "secfs-erofs", "-n", "default", "--timeout=120s")
