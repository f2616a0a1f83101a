"""The CSI test parts deployed into a test cluster as a real driver is: one
image built here (busybox, the project's csi-hostpath, csi-registrar and
csi-resizer, and the kubernetes-csi csi-provisioner and csi-attacher, from
hack/parts/csi.sh), and one pod on the node, as csi-driver-host-path deploys
itself: the driver (privileged, the kubelet's root dir mounted with
Bidirectional propagation), the registrar (the kubelet's plugins_registry),
the provisioner, the resizer and, for a driver that requires attach, the
attacher. Plus the CSIDriver object and a StorageClass.

The sidecars talk to the API server with the cluster's admin kubeconfig
(mounted from the host, the pod on the host network): the test control plane
runs without service networking.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Protocol

from kubelet.testing import images, oci
from kubelet.testing.csi import DRIVER_NAME, binary


class Command(Protocol):
    """ControlPlane.kubectl, Containerd.ctr: run the tool with these arguments."""

    def __call__(self, *args: str, check: bool = ...) -> subprocess.CompletedProcess[str]: ...


IMAGE = "localhost/kubeletpy/csi-parts:test"
NAMESPACE = "csi-hostpath"
STORAGE_CLASS = "csi-hostpath"
SIDECARS = ("csi-hostpath", "csi-registrar", "csi-provisioner", "csi-attacher", "csi-resizer")


def build_image(path: str) -> str:
    """The parts' image as an OCI tarball (for `ctr images import`)."""
    files = {f"bin/{name}": images._read(binary(name)) for name in SIDECARS}
    layer = oci.layer_tar(files, {}, [], {name: 0o755 for name in files})
    return oci.write_oci_tar(path, IMAGE, [images.busybox_layer(), layer], [], ["sh"])


@dataclass
class Deployment:
    node: str
    root_dir: str  # the kubelet's --root-dir on the host
    state_dir: str  # where the driver keeps its volumes on the host
    kubeconfig: str  # the admin kubeconfig (and its cert files) on the host
    attach_required: bool = False
    max_volumes: int = 0

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.root_dir, "plugins", DRIVER_NAME)

    def manifests(self) -> list[dict[str, Any]]:
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            self.csidriver(),
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": DRIVER_NAME,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": True,
            },
            self.pod(),
        ]

    def csidriver(self) -> dict[str, Any]:
        return {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": DRIVER_NAME},
            "spec": {
                "attachRequired": self.attach_required,
                "podInfoOnMount": True,
                "fsGroupPolicy": "File",
                "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                "storageCapacity": False,
            },
        }

    def pod(self) -> dict[str, Any]:
        def host(name: str, path: str, kind: str = "DirectoryOrCreate") -> dict[str, Any]:
            return {"name": name, "hostPath": {"path": path, "type": kind}}

        kube_dir = os.path.dirname(os.path.realpath(self.kubeconfig))
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "csi-hostpath", "namespace": NAMESPACE, "labels": {"app": "csi"}},
            "spec": {
                "nodeName": self.node,
                "hostNetwork": True,
                # As real node plugins run: not the first to go under node pressure.
                "priorityClassName": "system-node-critical",
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 5,
                "tolerations": [{"operator": "Exists"}],
                "containers": [*self._node_containers(), *self._controller_containers(kube_dir)],
                "volumes": [
                    host("socket-dir", self.socket_dir),
                    host("kubelet-root", self.root_dir, "Directory"),
                    host("registration", os.path.join(self.root_dir, "plugins_registry")),
                    host("state", self.state_dir),
                    host("kube", kube_dir, "Directory"),
                    # Block volumes are loop devices: a new one's node must
                    # reach the driver (a container's /dev is a copy).
                    host("dev", "/dev", "Directory"),
                ],
            },
        }

    def _node_containers(self) -> list[dict[str, Any]]:
        """The driver (privileged: it mounts into the kubelet's root) and the registrar."""
        driver_args = [
            "--endpoint=unix:///csi/csi.sock",
            f"--nodeid={self.node}",
            f"--statedir={self.state_dir}",
            f"--max-volumes-per-node={self.max_volumes}",
            f"--attach-required={str(self.attach_required).lower()}",
        ]
        root = {"name": "kubelet-root", "mountPath": self.root_dir,
                "mountPropagation": "Bidirectional"}  # fmt: skip
        registrar_args = [
            "--csi-address=/csi/csi.sock",
            f"--kubelet-registration-path={self.socket_dir}/csi.sock",
            "--plugin-registration-path=/registration",
        ]
        socket = {"name": "socket-dir", "mountPath": "/csi"}
        return [
            {
                "name": "hostpath",
                "image": IMAGE,
                "command": ["/bin/csi-hostpath"],
                "args": driver_args,
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    socket,
                    root,
                    {"name": "state", "mountPath": self.state_dir},
                    {"name": "dev", "mountPath": "/dev"},
                ],
            },
            {
                "name": "registrar",
                "image": IMAGE,
                "command": ["/bin/csi-registrar"],
                "args": registrar_args,
                "volumeMounts": [socket, {"name": "registration", "mountPath": "/registration"}],
            },
        ]

    def _controller_containers(self, kube_dir: str) -> list[dict[str, Any]]:
        """The provisioner, the resizer, and the attacher when the driver
        requires attach."""
        mounts = [
            {"name": "socket-dir", "mountPath": "/csi"},
            {"name": "kube", "mountPath": kube_dir, "readOnly": True},
        ]
        api_args = ["--csi-address=/csi/csi.sock", f"--kubeconfig={self.kubeconfig}", "--v=3"]
        sidecars = [("provisioner", [*api_args, "--feature-gates=Topology=true",
                                     "--extra-create-metadata"]),
                    ("resizer", api_args)]  # fmt: skip
        if self.attach_required:
            sidecars.append(("attacher", api_args))
        return [
            {
                "name": name,
                "image": IMAGE,
                "command": [f"/bin/csi-{name}"],
                "args": args,
                "volumeMounts": mounts,
            }
            for name, args in sidecars
        ]


def apply(kubectl: Command, objects: list[dict[str, Any]]) -> None:
    """kubectl apply of the objects (kubectl: ControlPlane.kubectl-like)."""
    doc = {"apiVersion": "v1", "kind": "List", "items": objects}
    path = f"/tmp/kpy-csi-deploy-{os.getpid()}-{time.monotonic_ns()}.json"
    with open(path, "w") as fh:
        json.dump(doc, fh)
    try:
        r = kubectl("apply", "-f", path, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl apply failed: {r.stderr}")
    finally:
        os.unlink(path)


def import_image(ctr: Command, tar: str) -> None:
    """Into containerd's k8s.io namespace (ctr: Containerd.ctr-like)."""
    ctr("images", "import", "--all-platforms", tar)


def registered(kubectl: Command, node: str) -> dict[str, Any] | None:
    """The driver's entry in the node's CSINode, once registered."""
    r = kubectl("get", "csinode", node, "-o", "json", check=False)
    if r.returncode != 0:
        return None
    drivers = json.loads(r.stdout).get("spec", {}).get("drivers") or []
    return next((d for d in drivers if d.get("name") == DRIVER_NAME), None)
