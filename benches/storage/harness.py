"""The upstream storage test suites against a pre-installed CSI driver, run
by the conformance harness (benches/conformance/harness.py) with three
changes: kube-controller-manager also runs the storage controllers (PV
binder, attach-detach, ephemeral volumes, protection), the CSI test parts
are deployed once the node is Ready (the same pod, image and driver for
either kubelet: kubelet.testing.csi_deploy), and the e2e binary is
e2e-storage.test (hack/parts/csi/build-e2e.sh) given the driver definition file
(DRIVER_FILE) with --storage.testdriver.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from benches.conformance.harness import BIN, Run, RunFailed, log_tail
from kubelet.testing import csi as csi_parts
from kubelet.testing import csi_deploy
from kubelet.testing.controlplane import STORAGE_CONTROLLERS, ControlPlane

DRIVER_FILE = Path(__file__).resolve().parent / "driver.yaml"
# The storage suites of this driver, single node, without snapshots (the
# driver has none) and without what needs more than one node or disrupts it.
FOCUS = r"External.Storage \[Driver: hostpath.csi.kubeletpy.local\]"
SKIP = r"\[Disruptive\]|\[Feature:|\[Serial\]|\[Slow\]|[Ss]napshot|multiple nodes|different node"
REGISTER_TIMEOUT = 240.0


class StorageRun(Run):
    attach_required = True

    def control_plane(self) -> ControlPlane:
        return ControlPlane(
            str(self.dir / "cp"), controllers=True, extra_controllers=STORAGE_CONTROLLERS
        )

    def suite_binary(self) -> Path:
        return BIN / "e2e-storage.test"

    def suite_args(self) -> list[str]:
        return [f"--storage.testdriver={DRIVER_FILE}"]

    def after_node_ready(self) -> None:
        assert self.cp is not None and self.ctd is not None
        tar = csi_deploy.build_image(str(self.dir / "csi-parts.tar"))
        csi_deploy.import_image(self.ctd.ctr, tar)
        dep = csi_deploy.Deployment(
            self.node,
            str(self.dir / "root"),
            str(self.dir / "csi-state"),
            self.cp.admin_kubeconfig,
            attach_required=self.attach_required,
        )
        csi_deploy.apply(self.cp.kubectl, dep.manifests())
        deadline = time.monotonic() + REGISTER_TIMEOUT
        while csi_deploy.registered(self.cp.kubectl, self.node) is None:
            self._check_kubelet()
            if time.monotonic() > deadline:
                pod = self.cp.kubectl(
                    "get", "pod", "-n", csi_deploy.NAMESPACE, "-o", "json", check=False
                ).stdout
                raise RunFailed(
                    f"the CSI driver did not register with the {self.opts.kubelet} kubelet in "
                    f"{REGISTER_TIMEOUT:.0f}s; its pod: {_statuses(pod)}; kubelet log tail:\n"
                    + log_tail(self.kubelet_log)
                )
            time.sleep(2)

    def stop(self) -> None:
        super().stop()
        # Block volumes the driver had no time to unstage: their loop devices.
        csi_parts.detach_loops_under(str(self.dir))


def _statuses(pods_json: str) -> str:
    try:
        items = json.loads(pods_json).get("items", [])
    except ValueError:
        return pods_json[:500]
    return "; ".join(
        f"{c.get('name')}: {c.get('state')}"
        for p in items
        for c in (p.get("status") or {}).get("containerStatuses") or []
    )[:2000]
