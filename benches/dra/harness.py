"""The upstream DRA e2e suite (test/e2e/dra) run by the conformance harness
(benches/conformance/harness.py) with four changes:

- kube-controller-manager also runs the controllers the suite's workloads
  need (DRA_CONTROLLERS), and the API server serves resource.k8s.io's beta
  versions too (BETA_APIS);
- the e2e binary is e2e-dra.test (hack/parts/dra/build-e2e.sh), the
  Options' suite;
- the kubelet's root directory is /var/lib/kubelet: the suite's test driver
  reaches the node through a proxy pod (its testing manifest
  dra/dra-test-driver-proxy.yaml, unmodified) whose hostPath volumes name the
  kubelet's plugin and registration directories by their default paths;
- that pod's image, registry.k8s.io/sig-storage/hostpathplugin:v1.7.3, is made
  here: busybox (the suite runs sh, sleep, rm and base64 in it) and the
  project's stand-in for csi-driver-host-path's binary in the one mode the
  suite uses, --proxy-endpoint (hack/parts/csi/cmd/hostpathplugin).

/var/lib/kubelet is the host's: one run at a time (a lock), refused when
something else keeps files there, emptied (mounts first) when the run stops.
The driver's CDI files go to the host's /var/run/cdi, where containerd 2
reads them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
from pathlib import Path

from benches.conformance.harness import Options, Run, RunFailed
from kubelet.testing import csi as csi_parts
from kubelet.testing import images, oci
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.process import unmount_under

KUBELET_ROOT = Path("/var/lib/kubelet")
LOCK = "/tmp/kpy-dra-e2e.lock"
PROXY_REF = "registry.k8s.io/sig-storage/hostpathplugin:v1.7.3"
# The e2e binary (benches.conformance.harness.SUITES builds it).
SUITE = "e2e-dra.test"
# The suite's "with v1beta1 API" and "with v1beta2 API" specs drive the
# kubelet through claims of those versions, which v1.34's API server serves
# only when asked (as upstream's DRA CI jobs ask).
BETA_APIS = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
# What the suite's workloads need beyond the conformance controllers: the
# proxy pod's ReplicaSet, the DaemonSet and rolling-update specs, claims
# generated from templates, and the ResourceQuota spec's counting.
DRA_CONTROLLERS = (
    "replicaset-controller",
    "daemonset-controller",
    "deployment-controller",
    "resourceclaim-controller",
    "resourcequota-controller",
)


def proxy_image(directory: str) -> str:
    """The proxy pod's image as an OCI tarball: busybox and /hostpathplugin."""
    binary = images._read(csi_parts.binary("hostpathplugin"))
    layer = oci.layer_tar({"hostpathplugin": binary}, {}, [], {"hostpathplugin": 0o755})
    path = os.path.join(directory, "hostpathplugin.tar")
    return oci.write_oci_tar(path, PROXY_REF, [images.busybox_layer(), layer], [], ["sh"])


def _live(path: Path) -> bool:
    """A file someone may be using: anything but a directory or a socket no
    one listens on (a stopped kubelet leaves its sockets behind)."""
    if path.is_dir():
        return False
    if not path.is_socket():
        return True
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def _in_use(root: Path) -> list[str]:
    """Files under root that a kubelet may be using."""
    if not root.exists():
        return []
    return [str(p) for p in root.rglob("*") if _live(p)][:5]


class DRARun(Run):
    def __init__(self, opts: Options, image_tars: dict[str, str]) -> None:
        super().__init__(opts, image_tars)
        self._lock = -1  # the fd of LOCK while the run holds it
        self._owns_root = False  # /var/lib/kubelet was free: the run empties it at the end

    def root_dir(self) -> Path:
        return KUBELET_ROOT

    def control_plane(self) -> ControlPlane:
        return ControlPlane(
            str(self.dir / "cp"),
            controllers=True,
            extra_controllers=DRA_CONTROLLERS,
            extra_args=[f"--runtime-config={BETA_APIS}"],
        )

    def start(self) -> None:
        self._lock = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFailed(f"another DRA e2e run holds {LOCK}") from None
        left = _in_use(KUBELET_ROOT)
        if left:
            raise RunFailed(
                f"{KUBELET_ROOT} holds files ({', '.join(left)}): another kubelet's? "
                "The DRA suite needs that root directory for its own kubelet"
            )
        self._owns_root = True
        super().start()

    def stop(self) -> None:
        super().stop()
        if self._owns_root:
            unmount_under(KUBELET_ROOT)
            shutil.rmtree(KUBELET_ROOT, ignore_errors=True)
            self._owns_root = False
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1
