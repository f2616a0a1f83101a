"""Block `local` PVs end to end below the API server: a loop device made
here (and detached at the end) is named by a PV through a discovery-style
link; the volume manager hands the device to the container's volumeDevices
and the simulated runtime creates the container with it. A path a pod could
have planted (through the kubelet's root dir) and a Block hostPath PV are
refused with a FailedMount event. Needs root (loop devices)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.mounts import make_block_devices
from kubelet.container.runtime import Device, RunContainerOptions
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_config
from kubelet.testing import csi as parts
from kubelet.testing.parts import part_unavailable
from kubelet.testing.wait import wait_for_async
from kubelet.volume import VolumeHost
from kubelet.volume.pvc import PVCPlugin
from kubelet.volumemanager.manager import VolumeManagerImpl
from tests.integration.csi.helpers import FakeAPI, created_devices


def bind(api: FakeAPI, name: str, source: dict[str, Any]) -> None:
    """The claim `name` bound to the Block PV `pv-<name>` of that source."""
    api.objects[f"/api/v1/namespaces/ns/persistentvolumeclaims/{name}"] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"volumeName": f"pv-{name}"},
        "status": {"phase": "Bound"},
    }
    api.objects[f"/api/v1/persistentvolumes/pv-{name}"] = {
        "metadata": {"name": f"pv-{name}"},
        "spec": {
            "claimRef": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
            "capacity": {"storage": "4Mi"},
            "volumeMode": "Block",
            **source,
        },
    }


def block_pod(uid: str, claim: str, read_only: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}],
                }
            ],
            "volumes": [
                {
                    "name": "data",
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only},
                }
            ],
        },
    }


@pytest.fixture
def loop_device() -> Iterator[tuple[Path, str]]:
    """(a scratch dir, /dev/loopN backed by a 4 MiB file in it)."""
    if os.geteuid() != 0:
        part_unavailable("loop devices", "attaching one needs root")
    tmp = Path(tempfile.mkdtemp(prefix="kpylocal-", dir="/tmp"))
    backing = tmp / "disk.img"
    with open(backing, "wb") as fh:
        fh.truncate(4 << 20)
    try:
        dev = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        yield tmp, dev
    finally:
        parts.detach_loops_under(str(tmp))
        assert parts.loop_devices_under(str(tmp)) == []
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
async def volumes(
    loop_device: tuple[Path, str],
) -> AsyncIterator[tuple[Path, str, FakeAPI, VolumeManagerImpl, list[str]]]:
    tmp, dev = loop_device
    root = tmp / "root"
    root.mkdir()
    api, events = FakeAPI(), []
    vm = VolumeManagerImpl(
        VolumeHost(str(root), "node-1"),
        [PVCPlugin(api.get, str(root))],
        recorder=lambda ref, etype, reason, msg: events.append(msg),
    )
    stop = asyncio.Event()
    task = asyncio.ensure_future(vm.run(stop))
    yield tmp, dev, api, vm, events
    stop.set()
    await task


async def test_local_block_pv_reaches_the_container_as_its_device(volumes, tmp_path: Path):
    tmp, dev, api, vm, _events = volumes
    (tmp / "disks/by-id").mkdir(parents=True)
    os.symlink(dev, tmp / "disks/by-id/local-1")
    bind(api, "claim-1", {"local": {"path": str(tmp / "disks/by-id/local-1")}})
    p = block_pod("l1", "claim-1")
    vm.add_pod(p)
    await wait_for_async("the device mapped", lambda: not vm.unmounted_volumes(p), 30.0, 0.05)
    vol = vm.get_mounted_volumes("l1")["data"]
    # The device node itself, never the link.
    assert (vol.block, vol.host_path, vol.read_only) == (True, dev, False)
    devices = make_block_devices(p["spec"]["containers"][0], vm.get_mounted_volumes("l1"))
    assert devices == [Device("/dev/xvda", dev, "mrw")]
    cfg = container_config(
        NodeSettings(), p, p["spec"]["containers"][0], 0, "busybox:1.36", "h",
        RunContainerOptions(devices=devices),
    )  # fmt: skip
    assert await created_devices(tmp_path, cfg) == [
        {"containerPath": "/dev/xvda", "hostPath": dev, "permissions": "mrw"}
    ]
    assert stat.S_ISBLK(os.stat(dev).st_mode)
    vm.remove_pod("l1")
    assert await vm.wait_for_unmount("l1", 30)
    # Nothing was made for the pod, and the device is left as it was.
    assert not (tmp / "root/pods/l1/volumeDevices").exists()
    assert parts.loop_devices_under(str(tmp)) == [dev]


async def test_planted_paths_and_block_host_path_refused(volumes):
    tmp, dev, api, vm, events = volumes
    planted = tmp / "root/pods/other/volumes/kubernetes.io~empty-dir/v"
    planted.mkdir(parents=True)
    os.symlink(dev, planted / "disk")
    os.symlink(str(planted / "disk"), tmp / "innocent")
    bind(api, "claim-p", {"local": {"path": str(tmp / "innocent")}})
    bind(api, "claim-h", {"hostPath": {"path": dev}})
    for uid, claim in (("p1", "claim-p"), ("h1", "claim-h")):
        vm.add_pod(block_pod(uid, claim))
    await wait_for_async("both refused", lambda: len(set(events)) >= 2, 30.0, 0.05)
    assert set(events) == {
        f'MapVolume.EvalHostSymlinks failed for volume "data" : {tmp}/innocent passes '
        f"through the kubelet's root dir {tmp}/root",
        'MapVolume.FindMapperPluginBySpec failed for volume "data" : PersistentVolume '
        'pv-claim-h is a hostPath volume with volumeMode "Block": no volume plugin maps it '
        "as a block device (only local and CSI ones)",
    }
    assert vm.get_mounted_volumes("p1") == {} and vm.get_mounted_volumes("h1") == {}
