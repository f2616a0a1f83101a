"""Mount latency at density: N pods, each with its own CSI volume (a claim
provisioned before the timed window), ours vs the upstream kubelet.

    python -m benches.storage.latency [--n 500] [--kubelet ours upstream]
        [--rate 50] [--relist 0.25] [--attach] [--runtime sim|containerd]

The record goes to benches/results/csi-mount-latency-<UTC time>.json.

Built on the density harness (benches/density/harness.py): one control plane
with the storage controllers, then for each kubelet a fresh Node, a fresh
runtime and the CSI test parts as host processes for that node (the
project's csi-hostpath driver and csi-registrar, external-provisioner, and
external-attacher with --attach). Before the timed window the N claims are
provisioned and bound; then N pods are created at --rate and timed from
creation to Running as seen in a watch. Every pod's volume is staged and
published by the real driver with real bind mounts under the kubelet's root;
on the simulated runtime (the default) only the containers are simulated,
so the figure is the kubelet's volume path, not runc's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benches import records
from benches.density.__main__ import table
from benches.density.cluster import start_control_plane, upstream_kubelet
from benches.density.harness import Run
from benches.density.spec import RUNTIMES, Result, Spec
from kubelet.client.rest import APIClient, APIError
from kubelet.testing import csi as parts
from kubelet.testing import csi_deploy
from kubelet.testing.controlplane import STORAGE_CONTROLLERS, ControlPlane

REPO = Path(__file__).resolve().parents[2]
PROVISION_TIMEOUT = 900.0


class CSIRun(Run):
    """A density run whose every pod mounts its own provisioned CSI volume."""

    attach = False
    # Upstream took over 180 s for 500 volumes here: let every run finish.
    min_wait = 900.0

    def __init__(self, cp: ControlPlane, spec: Spec, workdir: Path, index: int) -> None:
        super().__init__(cp, spec, workdir, index)
        self.result.template = "csi-attach" if self.attach else "csi"
        # Short: the driver's socket path is at most 107 bytes.
        self.csi_dir = Path(tempfile.mkdtemp(prefix="kcsi-", dir="/tmp"))
        self.provision_s: float | None = None

    def _pod(self, i: int) -> dict[str, Any]:
        pod = super()._pod(i)
        pod["spec"]["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": f"c{i:05d}"}}
        ]
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        return pod

    def _spawn(self, argv: list[str], log: str) -> None:
        self.procs.append(
            subprocess.Popen(argv, stdout=open(self.dir / log, "wb"), stderr=subprocess.STDOUT)
        )

    async def _before_pods(self, admin: APIClient) -> None:
        driver = parts.HostpathDriver(
            str(self.csi_dir), self.node, attach_required=self.attach
        ).start()
        assert driver.proc is not None
        self.procs.append(driver.proc)
        registry = self.dir / "root" / "plugins_registry"
        registry.mkdir(parents=True, exist_ok=True)
        self._spawn(
            [parts.binary("csi-registrar"), f"--csi-address={driver.socket}",
             f"--kubelet-registration-path={driver.socket}",
             f"--plugin-registration-path={registry}"],
            "registrar.log",
        )  # fmt: skip
        sidecar = [f"--csi-address={driver.socket}", f"--kubeconfig={self.cp.admin_kubeconfig}"]
        self._spawn(
            [parts.binary("csi-provisioner"), *sidecar, "--feature-gates=Topology=true",
             "--worker-threads=100", "--kube-api-qps=200", "--kube-api-burst=400"],
            "provisioner.log",
        )  # fmt: skip
        if self.attach:
            self._spawn(
                [parts.binary("csi-attacher"), *sidecar, "--worker-threads=100",
                 "--kube-api-qps=200", "--kube-api-burst=400"],
                "attacher.log",
            )  # fmt: skip
        await self._wait_registered(admin)
        t0 = time.monotonic()
        await self._provision(admin)
        self.provision_s = time.monotonic() - t0

    async def _wait_registered(self, admin: APIClient) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                node = await admin.get(f"/apis/storage.k8s.io/v1/csinodes/{self.node}")
                names = [d.get("name") for d in node.get("spec", {}).get("drivers") or []]
                if parts.DRIVER_NAME in names:
                    return
            except APIError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the CSI driver did not register with {self.node}")
            await asyncio.sleep(0.5)

    async def _provision(self, admin: APIClient) -> None:
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            claim = {
                "metadata": {"name": f"c{i:05d}"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": csi_deploy.STORAGE_CLASS,
                    "resources": {"requests": {"storage": "1Mi"}},
                },
            }
            async with sem:
                await admin.create(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims", claim)

        await asyncio.gather(*(one(i) for i in range(self.spec.n)))
        deadline = time.monotonic() + PROVISION_TIMEOUT
        while True:
            lst = await admin.get(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims")
            bound = sum(1 for c in lst["items"] if c.get("status", {}).get("phase") == "Bound")
            if bound >= self.spec.n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {bound} of {self.spec.n} claims bound")
            await asyncio.sleep(1)

    def _stop_all(self) -> None:
        # The kubelet first: its last tear-downs still need the driver.
        kubelet = next(
            (p for p in self.procs if isinstance(p.args, list) and "--kubeconfig" in p.args), None
        )
        if kubelet is not None and kubelet.poll() is None:
            kubelet.terminate()
            try:
                kubelet.wait(30)
            except subprocess.TimeoutExpired:
                kubelet.kill()
        super()._stop_all()
        parts.unmount_all_under(str(self.csi_dir))
        shutil.rmtree(self.csi_dir, ignore_errors=True)


class AttachRun(CSIRun):
    attach = True


def storage_objects(attach: bool) -> list[dict[str, Any]]:
    dep = csi_deploy.Deployment("", "", "", "", attach_required=attach)
    return [o for o in dep.manifests() if o["kind"] in ("CSIDriver", "StorageClass")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.storage.latency", description=__doc__)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--kubelet", nargs="+", choices=["ours", "upstream"],
                    default=["ours", "upstream"])  # fmt: skip
    ap.add_argument("--rate", type=float, default=50.0, help="pods created per second")
    ap.add_argument("--relist", type=float, default=0.25, help="our relist period (s)")
    ap.add_argument("--attach", action="store_true", help="the driver requires attach")
    ap.add_argument("--runtime", choices=RUNTIMES, default="sim")
    ap.add_argument("--hold", type=float, default=10.0, help="steady state seconds")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("mounts and runtimes need root", file=sys.stderr)
        return 2
    for name in ("csi-hostpath", "csi-registrar", "csi-provisioner") + (
        ("csi-attacher",) if args.attach else ()
    ):
        parts.binary(name)
    if "upstream" in args.kubelet and upstream_kubelet() is None:
        print("upstream kubelet not built (hack/build-control-plane.sh kubelet)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))  # short: socket paths
    cp = start_control_plane(work, controllers=True, extra_controllers=STORAGE_CONTROLLERS)
    results: list[Result] = []
    extra: list[dict[str, Any]] = []
    cls = AttachRun if args.attach else CSIRun
    started = records.begin(argv, "benches.storage.latency")
    try:
        csi_deploy.apply(cp.kubectl, storage_objects(args.attach))
        for i, kubelet in enumerate(args.kubelet):
            relist = args.relist if kubelet == "ours" else 1.0
            spec = Spec(kubelet, relist, args.n, args.rate, args.hold, template="plain",
                        runtime=args.runtime)  # fmt: skip
            run = cls(cp, spec, work, i)
            r = asyncio.run(run.run())
            results.append(r)
            extra.append({"kubelet": kubelet, "provision_s": run.provision_s})
            print(table([r]).splitlines()[-1], flush=True)
    finally:
        cp.stop()
    figures = {
        "what": f"{args.n} pods, each with its own CSI volume (claim provisioned beforehand), "
        "created at the given rate; latency = pod created -> Running seen in a watch",
        "runtime": args.runtime,
        "attach_required": args.attach,
        "results": [asdict(r) | e for r, e in zip(results, extra, strict=True)],
    }
    print()
    print(table(results))
    records.write(started, "csi-mount-latency", figures)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
