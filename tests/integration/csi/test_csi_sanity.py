"""The project's csi-hostpath driver against csi-sanity, csi-test's CSI
protocol conformance suite (built from github.com/kubernetes-csi/csi-test/v5
by hack/parts/csi.sh): every spec the driver's capabilities select passes,
without and with attach (ControllerPublishVolume), and with block access
(volumes on loop devices, which the run must leave detached). The kubelet's own CSI
tests rely on the driver behaving as the spec says; this is what shows it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kubelet.testing import csi as parts
from kubelet.testing.parts import part_unavailable, starting


@pytest.mark.parametrize(
    ("attach", "access"),
    [(False, "mount"), (True, "mount"), (False, "block")],
    ids=["no-attach", "attach", "block"],
)
def test_driver_passes_csi_sanity(attach: bool, access: str) -> None:
    if os.geteuid() != 0:
        part_unavailable("csi-hostpath", "it bind-mounts: needs root")
    with starting("CSI test parts", parts.Unavailable):
        sanity = parts.binary("csi-sanity")
        parts.binary("csi-hostpath")
    tmp = Path(tempfile.mkdtemp(prefix="kpysan-", dir="/tmp"))
    driver = parts.HostpathDriver(str(tmp), "node-1", attach_required=attach).start()
    try:
        junit = tmp / "junit.xml"
        r = subprocess.run(
            [
                sanity,
                f"--csi.endpoint=unix://{driver.socket}",
                f"--csi.stagingdir={tmp / 'staging'}",
                f"--csi.mountdir={tmp / 'mount'}",
                f"--csi.testvolumeaccesstype={access}",
                f"--ginkgo.junit-report={junit}",
                "--ginkgo.no-color",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        suite = ET.parse(junit).getroot()
        cases = suite.findall(".//testcase")
        failed = [c.get("name") for c in cases if c.find("failure") is not None]
        passed = [c for c in cases if c.find("failure") is None and c.find("skipped") is None]
        assert failed == [], r.stdout[-4000:]
        assert r.returncode == 0
        # The driver's capabilities select the node, controller and expansion specs.
        assert len(passed) >= (50 if attach else 40)
        assert parts.loop_devices_under(str(tmp)) == []
    finally:
        driver.stop()
        parts.unmount_all_under(str(tmp))
        shutil.rmtree(tmp, ignore_errors=True)
