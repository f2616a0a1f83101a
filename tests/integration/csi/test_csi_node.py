"""The kubelet's CSI code against the real csi-hostpath driver and registrar
(hack/parts/csi.sh), without a cluster: registration through the plugin
manager, staging once per volume and publishing per pod with real bind
mounts, the upstream on-disk layout, inline ephemeral volumes, and the
restart: mounted volumes adopted, those of pods gone unpublished and
unstaged. Claims come from a fake API getter. Needs root (mounts)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.mounts import make_block_devices
from kubelet.container.runtime import Device, RunContainerOptions
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_config
from kubelet.metrics import REGISTRY
from kubelet.pluginmanager import CSI_PLUGIN
from kubelet.pluginmanager.manager import PluginManager, registry_dir
from kubelet.testing import csi as parts
from kubelet.testing.parts import part_unavailable, starting
from kubelet.testing.wait import wait_for_async
from kubelet.types import Pod
from kubelet.util import mountutil
from kubelet.volume import VolumeHost
from kubelet.volume.csi.csidriver import CSIDrivers
from kubelet.volume.csi.expand import Expander
from kubelet.volume.csi.host import CSIHost
from kubelet.volume.pvc import PVCPlugin
from kubelet.volumemanager.manager import VolumeManagerImpl
from tests.integration.csi.helpers import FakeAPI, created_devices

NODE = "node-1"
DRIVER = parts.DRIVER_NAME
CSI_DRIVER_SPEC = {
    "attachRequired": False,
    "podInfoOnMount": True,
    "fsGroupPolicy": "File",
    "volumeLifecycleModes": ["Persistent", "Ephemeral"],
}


def pod(uid: str, *volumes: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}], "volumes": list(volumes)},
    }


def claim_vol(name: str, claim: str) -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


class Node:
    """One kubelet's CSI parts and volume manager on a root dir."""

    def __init__(
        self,
        root: Path,
        api: FakeAPI,
        spec: dict[str, Any],
        volume_health: bool = False,
        expand: bool = False,
    ) -> None:
        self.root = root
        self.events: list[str] = []
        self.csi = CSIHost(
            VolumeHost(str(root), NODE),
            None,
            None,
            csidrivers=CSIDrivers(None, {DRIVER: spec}),
            volume_health=volume_health,
        )
        if expand:
            # The expander only (CSIHost makes it with an API client, and
            # then the CSINode writes too, which this fake API has not).
            expander = Expander(api, self.csi.drivers, str(root))  # type: ignore[arg-type]
            self.csi.plugin.expander = expander
        self.pm = PluginManager(registry_dir(str(root)))
        self.pm.add_handler(CSI_PLUGIN, self.csi.handler)
        self.vm = VolumeManagerImpl(
            VolumeHost(str(root), NODE),
            [PVCPlugin(api.get), self.csi.plugin],
            recorder=lambda ref, etype, reason, msg: self.events.append(msg),
        )
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.csi.start()
        await self.vm.reconstruct()
        self.tasks = [
            asyncio.ensure_future(self.pm.run(self.stop)),
            asyncio.ensure_future(self.vm.run(self.stop)),
            *(asyncio.ensure_future(c) for _, c in self.csi.loops(self.stop)),
        ]
        await wait_for_async(
            "the driver registered",
            lambda: self.csi.drivers.get(DRIVER) is not None,
            60.0,
            0.05,
            retry_on=(),
        )

    async def shutdown(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def all_mounted(vm: VolumeManagerImpl, pod: Pod) -> None:
    await wait_for_async(
        "every volume of the pod mounted",
        lambda: not vm.unmounted_volumes(pod),
        60.0,
        0.05,
        retry_on=(),
    )


def mounted(path: Path) -> bool:
    return str(path) in mountutil.mount_table()


def staging_dir(root: Path, handle: str) -> Path:
    digest = hashlib.sha256(handle.encode()).hexdigest()
    return root / "plugins" / "kubernetes.io" / "csi" / DRIVER / digest


def pod_dir(root: Path, uid: str, name: str) -> Path:
    return root / "pods" / uid / "volumes" / "kubernetes.io~csi" / name


@pytest.fixture
async def env() -> AsyncIterator[tuple[Path, parts.HostpathDriver, FakeAPI, Any]]:
    if os.geteuid() != 0:
        part_unavailable("CSI test parts", "they bind-mount: needs root")
    # Short: a Unix socket path has at most 107 bytes.
    tmp_path = Path(tempfile.mkdtemp(prefix="kpycsi-", dir="/tmp"))
    root = tmp_path / "root"
    root.mkdir()
    with starting("CSI test parts", parts.Unavailable):
        driver = parts.HostpathDriver(str(tmp_path / "driver"), NODE).start()
        registrar = parts.Registrar(
            str(tmp_path / "driver"), driver.socket, registry_dir(str(root))
        )
    os.makedirs(registry_dir(str(root)), exist_ok=True)
    registrar.start()
    api = FakeAPI()
    nodes: list[Node] = []

    async def node(
        spec: dict[str, Any] = CSI_DRIVER_SPEC, volume_health: bool = False, expand: bool = False
    ) -> Node:
        n = Node(root, api, spec, volume_health, expand)
        nodes.append(n)
        await n.start()
        return n

    yield root, driver, api, node
    for n in nodes:
        await n.shutdown()
    registrar.stop()
    driver.stop()
    parts.unmount_all_under(str(tmp_path))
    shutil.rmtree(tmp_path, ignore_errors=True)


async def test_persistent_volume_staged_once_and_published_per_pod(env):
    root, driver, api, node = env
    handle = driver.create_volume("pv-a")
    api.bind("claim-a", "pv-a", handle)
    n = await node()
    a, b = pod("u1", claim_vol("data", "claim-a")), pod("u2", claim_vol("d", "claim-a"))
    n.vm.add_pod(a)
    await all_mounted(n.vm, a)
    staging = staging_dir(root, handle)
    assert mounted(staging / "globalmount")
    assert json.loads((staging / "vol_data.json").read_text()) == {
        "driverName": DRIVER,
        "volumeHandle": handle,
    }
    target = pod_dir(root, "u1", "pv-a") / "mount"
    assert mounted(target)
    assert n.vm.get_mounted_volumes("u1")["data"].host_path == str(target)
    data = json.loads((target.parent / "vol_data.json").read_text())
    assert data["specVolID"] == "pv-a" and data["volumeLifecycleMode"] == "Persistent"
    assert (
        data["attachmentID"]
        == "csi-" + hashlib.sha256(f"{handle}{DRIVER}{NODE}".encode()).hexdigest()
    )
    (target / "written-by-pod").write_text("hello")
    assert (Path(driver.data_dir(handle)) / "written-by-pod").read_text() == "hello"
    assert n.csi.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^{handle}"]

    n.vm.add_pod(b)
    await all_mounted(n.vm, b)
    assert driver.calls("NodeStageVolume") == 1
    assert driver.calls("NodePublishVolume") == 2

    n.vm.remove_pod("u1")
    assert await n.vm.wait_for_unmount("u1", 30)
    assert not pod_dir(root, "u1", "pv-a").exists()
    assert mounted(staging / "globalmount")  # pod u2 still uses it
    n.vm.remove_pod("u2")
    assert await n.vm.wait_for_unmount("u2", 30)
    await wait_for_async(
        "the staging dir removed", lambda: not staging.exists(), 60.0, 0.05, retry_on=()
    )
    assert driver.calls("NodeUnstageVolume") == 1
    assert n.csi.volumes_in_use() == []
    assert (Path(driver.data_dir(handle)) / "written-by-pod").read_text() == "hello"


async def test_inline_ephemeral_volume(env):
    root, driver, _api, node = env
    n = await node()
    inline = {"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1048576"}}}
    p = pod("u3", inline)
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    handle = "csi-" + hashlib.sha256(b"u3scratch").hexdigest()
    target = pod_dir(root, "u3", "scratch") / "mount"
    assert mounted(target)
    assert json.loads((target.parent / "vol_data.json").read_text())["volumeHandle"] == handle
    assert os.path.isdir(driver.data_dir(handle))
    assert n.csi.volumes_in_use() == []  # not attachable, not staged
    n.vm.remove_pod("u3")
    assert await n.vm.wait_for_unmount("u3", 30)
    assert not os.path.exists(driver.data_dir(handle))  # the driver's ephemeral volume went
    assert not pod_dir(root, "u3", "scratch").exists()


async def test_inline_volume_refused_by_a_persistent_only_driver(env):
    _root, _driver, _api, node = env
    n = await node({**CSI_DRIVER_SPEC, "volumeLifecycleModes": ["Persistent"]})
    p = pod("u4", {"name": "scratch", "csi": {"driver": DRIVER}})
    n.vm.add_pod(p)
    await wait_for_async("an event", lambda: n.events, 60.0, 0.05, retry_on=())
    assert n.events[0] == (
        'MountVolume.SetUp failed for volume "scratch" : volume mode "Ephemeral" not supported '
        f"by driver {DRIVER} (only supports ['Persistent'])"
    )


async def test_restart_adopts_mounted_volumes_and_cleans_those_of_gone_pods(env):
    root, driver, api, node = env
    for name in ("keep", "gone"):
        api.bind(f"claim-{name}", f"pv-{name}", driver.create_volume(f"pv-{name}"))
    first = await node()
    kept, gone = pod("u5", claim_vol("v", "claim-keep")), pod("u6", claim_vol("v", "claim-gone"))
    for p in (kept, gone):
        first.vm.add_pod(p)
    await wait_for_async(
        "both pods' volumes mounted",
        lambda: not first.vm.unmounted_volumes(kept) and not first.vm.unmounted_volumes(gone),
        60.0,
        0.05,
        retry_on=(),
    )
    await first.shutdown()  # the kubelet stops; mounts stay
    publishes, stages = driver.calls("NodePublishVolume"), driver.calls("NodeStageVolume")

    second = await node()
    second.vm.add_pod(kept)
    await all_mounted(second.vm, kept)
    assert await second.vm.cleanup_orphaned_pods({"u5"}) == []
    assert await second.vm.wait_for_unmount("u6", 30)
    assert driver.calls("NodePublishVolume") == publishes  # adopted, not published again
    assert driver.calls("NodeStageVolume") == stages
    assert mounted(pod_dir(root, "u5", "pv-keep") / "mount")
    assert not pod_dir(root, "u6", "pv-gone").exists()
    gone_handle = api.objects["/api/v1/persistentvolumes/pv-gone"]["spec"]["csi"]["volumeHandle"]
    keep_handle = api.objects["/api/v1/persistentvolumes/pv-keep"]["spec"]["csi"]["volumeHandle"]
    await wait_for_async(
        "the orphan's staging dir removed",
        lambda: not staging_dir(root, gone_handle).exists(),
        60.0,
        0.05,
        retry_on=(),
    )
    assert mounted(staging_dir(root, keep_handle) / "globalmount")
    assert second.csi.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^{keep_handle}"]


def _mount_options(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[4] == str(path):
                opts = fields[5].split(",")
    return opts


async def test_read_only_claim_and_fs_group(env):
    """readOnly on the claim source reaches NodePublish (the mount is read-only)
    and the container's mount; fsGroup is applied by the kubelet for a driver
    whose fsGroupPolicy is File."""
    root, driver, api, node = env
    handle = driver.create_volume("pv-ro")
    api.bind("claim-ro", "pv-ro", handle)
    handle2 = driver.create_volume("pv-rw")
    api.bind("claim-rw", "pv-rw", handle2)
    n = await node()
    ro = {"name": "ro", "persistentVolumeClaim": {"claimName": "claim-ro", "readOnly": True}}
    p = pod("u7", ro, claim_vol("rw", "claim-rw"))
    p["spec"]["securityContext"] = {"fsGroup": 4321}
    (Path(driver.data_dir(handle2)) / "existing").write_text("x")
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    mounted_vols = n.vm.get_mounted_volumes("u7")
    assert mounted_vols["ro"].read_only and not mounted_vols["rw"].read_only
    assert "ro" in _mount_options(pod_dir(root, "u7", "pv-ro") / "mount")
    rw_target = pod_dir(root, "u7", "pv-rw") / "mount"
    assert "rw" in _mount_options(rw_target)
    st = (rw_target / "existing").stat()
    assert st.st_gid == 4321 and st.st_mode & 0o060 == 0o060
    assert rw_target.stat().st_mode & 0o2000  # setgid: new files inherit the group
    n.vm.remove_pod("u7")
    assert await n.vm.wait_for_unmount("u7", 30)


async def test_volume_stats_come_from_the_driver(env):
    root, driver, api, node = env
    handle = driver.create_volume("pv-st", size=64 << 20)
    api.bind("claim-st", "pv-st", handle)
    n = await node()
    p = pod("u8", claim_vol("data", "claim-st"))
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    target = pod_dir(root, "u8", "pv-st") / "mount"
    (target / "blob").write_bytes(b"x" * (1 << 20))
    assert n.csi.plugin.volume_stats("data", str(root / "pods/u8/volumes/x~y/data")) is None
    query = n.csi.plugin.volume_stats("data", str(target))
    assert query is not None
    timed = (
        "kubelet_volume_metric_collection_duration_seconds_count",
        {"metric_source": driver.name},
    )
    before = REGISTRY.get_sample_value(*timed) or 0.0
    usage = await query()
    assert REGISTRY.get_sample_value(*timed) == before + 1  # as upstream, by the driver's name
    assert usage is not None
    assert usage.capacity_bytes == 64 << 20  # the driver's figure, not the host filesystem's
    assert usage.used_bytes >= 1 << 20
    assert usage.available_bytes == usage.capacity_bytes - usage.used_bytes
    assert usage.abnormal is None  # CSIVolumeHealth is off
    n.vm.remove_pod("u8")
    assert await n.vm.wait_for_unmount("u8", 30)


async def test_volume_health_from_the_driver_under_the_gate(env):
    # CSIVolumeHealth on: the driver's volume condition is reported as is.
    root, driver, api, node = env
    handle = driver.create_volume("pv-h", size=16 << 20)
    api.bind("claim-h", "pv-h", handle)
    n = await node(volume_health=True)
    p = pod("u9", claim_vol("data", "claim-h"))
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    target = pod_dir(root, "u9", "pv-h") / "mount"
    query = n.csi.plugin.volume_stats("data", str(target))
    assert query is not None
    usage = await query()
    assert usage is not None and usage.abnormal is False
    # The publish mount gone behind the kubelet's back: the driver says abnormal.
    mountutil.umount(str(target))
    usage = await query()
    assert usage is not None and usage.abnormal is True
    n.vm.remove_pod("u9")
    assert await n.vm.wait_for_unmount("u9", 30)


async def test_read_write_once_pod_volume_refused_to_a_second_pod_until_the_first_is_gone(env):
    root, driver, api, node = env
    handle = driver.create_volume("pv-rwop")
    api.bind("claim-rwop", "pv-rwop", handle)
    api.objects["/api/v1/persistentvolumes/pv-rwop"]["spec"]["accessModes"] = ["ReadWriteOncePod"]
    n = await node()
    first, second = pod("r1", claim_vol("v", "claim-rwop")), pod("r2", claim_vol("v", "claim-rwop"))
    n.vm.add_pod(first)
    await wait_for_async("first pod's volume", lambda: not n.vm.unmounted_volumes(first))
    # A pod bound by nodeName (no scheduler to enforce the access mode) is refused.
    n.vm.add_pod(second)
    await wait_for_async("FailedMount of the second pod", lambda: n.events)
    assert n.events[0] == (
        'MountVolume.SetUp failed for volume "pv-rwop" : volume uses the ReadWriteOncePod '
        "access mode and is already in use by another pod"
    )
    assert not pod_dir(root, "r2", "pv-rwop").exists()
    assert driver.calls("NodePublishVolume") == 1
    n.vm.remove_pod("r1")
    assert await n.vm.wait_for_unmount("r1", 30)
    await wait_for_async("second pod's volume", lambda: not n.vm.unmounted_volumes(second), 60)
    assert mounted(pod_dir(root, "r2", "pv-rwop") / "mount")


# ------------------------------------------------------------ raw block volumes


def block_pod(uid: str, claim: str, device: str = "/dev/xvda") -> dict[str, Any]:
    p = pod(uid, claim_vol("data", claim))
    p["spec"]["containers"] = [
        {
            "name": "c",
            "image": "busybox:1.36",
            "volumeDevices": [{"name": "data", "devicePath": device}],
        }
    ]
    return p


def block_paths(root: Path, pv: str, uid: str) -> tuple[Path, Path, Path]:
    """(staging dir, publish file, the staged volume's record dir), as upstream lays them out."""
    base = root / "plugins" / "kubernetes.io" / "csi" / "volumeDevices"
    return base / "staging" / pv, base / "publish" / pv / uid, base / pv / "data"


async def test_block_volume_mapped_into_a_container_and_torn_down(env, tmp_path: Path):
    """Block PV -> NodeStage (block access) at volumeDevices/staging/<pv> ->
    NodePublish of the file volumeDevices/publish/<pv>/<uid>, a block device
    (the driver's loop device) -> the container's CRI device at devicePath,
    accepted by the simulated runtime -> unpublish, unstage, loop detached."""
    root, driver, api, node = env
    handle = driver.create_volume("pv-blk", size=8 << 20, block=True)
    api.bind("claim-blk", "pv-blk", handle, volume_mode="Block")
    n = await node()
    p = block_pod("b1", "claim-blk")
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    staging, publish, record = block_paths(root, "pv-blk", "b1")
    assert staging.is_dir()
    assert stat.S_ISBLK(os.lstat(publish).st_mode)
    assert json.loads((record / "vol_data.json").read_text()) == {
        "driverName": DRIVER,
        "volumeHandle": handle,
    }
    pod_record = json.loads((pod_dir(root, "b1", "pv-blk") / "vol_data.json").read_text())
    assert pod_record["volumeMode"] == "Block" and pod_record["specVolID"] == "pv-blk"
    assert not (pod_dir(root, "b1", "pv-blk") / "mount").exists()
    link = root / "pods/b1/volumeDevices/kubernetes.io~csi/pv-blk"
    assert os.readlink(link) == str(publish)
    loops = parts.loop_devices_under(driver.state)
    assert len(loops) == 1 and os.stat(loops[0]).st_rdev == os.lstat(publish).st_rdev
    vol = n.vm.get_mounted_volumes("b1")["data"]
    assert (vol.block, vol.host_path, vol.read_only) == (True, str(publish), False)
    assert n.csi.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^{handle}"]
    query = n.csi.plugin.volume_stats("data", str(publish))
    assert query is not None
    usage = await query()
    assert usage is not None and usage.capacity_bytes == 8 << 20  # the driver's figure

    # What the container gets, through the simulated runtime.
    devices = make_block_devices(p["spec"]["containers"][0], n.vm.get_mounted_volumes("b1"))
    assert devices == [Device("/dev/xvda", str(publish), "mrw")]
    cfg = container_config(
        NodeSettings(), p, p["spec"]["containers"][0], 0, "busybox:1.36", "h",
        RunContainerOptions(devices=devices),
    )  # fmt: skip
    assert await created_devices(tmp_path, cfg) == [
        {"containerPath": "/dev/xvda", "hostPath": str(publish), "permissions": "mrw"}
    ]

    n.vm.remove_pod("b1")
    assert await n.vm.wait_for_unmount("b1", 30)
    await wait_for_async("the block dirs removed", lambda: not staging.exists(), 60.0, 0.05)
    assert not publish.parent.exists() and not record.parent.exists()
    assert not pod_dir(root, "b1", "pv-blk").exists()
    assert not (root / "pods/b1/volumeDevices").exists()
    assert driver.calls("NodeUnpublishVolume") == 1 and driver.calls("NodeUnstageVolume") == 1
    assert parts.loop_devices_under(driver.state) == []
    assert n.csi.volumes_in_use() == []


def _device_size(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


async def test_block_volume_expanded_on_the_node(env):
    """A Block claim whose PV grew with the node's part pending: the kubelet
    calls NodeExpandVolume on the publish file with block access (the driver
    refuses anything else), when the volume is mapped and again on a
    remount while in use; the device the container gets grows (the driver's
    loop device) and the claim's status records each size."""
    root, driver, api, node = env
    handle = driver.create_volume("pv-grow", size=8 << 20, block=True)
    api.bind("claim-grow", "pv-grow", handle, volume_mode="Block")
    claim = "/api/v1/namespaces/ns/persistentvolumeclaims/claim-grow"

    def claim_status() -> dict[str, Any]:
        status: dict[str, Any] = api.objects[claim]["status"]
        return status

    claim_status()["capacity"] = {"storage": "8Mi"}
    api.resize("claim-grow", "pv-grow", "16Mi")
    n = await node(expand=True)
    p = block_pod("e1", "claim-grow")
    n.vm.add_pod(p)
    await all_mounted(n.vm, p)
    _staging, publish, _record = block_paths(root, "pv-grow", "e1")
    assert _device_size(publish) == 16 << 20
    assert claim_status()["capacity"] == {"storage": "16Mi"}
    assert not claim_status().get("allocatedResourceStatuses")  # the node's part is done
    assert driver.calls("NodeExpandVolume") == 1

    api.resize("claim-grow", "pv-grow", "24Mi")
    n.vm.remount("e1")
    await wait_for_async(
        "the claim at its new size",
        lambda: claim_status()["capacity"] == {"storage": "24Mi"},
        60.0,
        0.05,
    )
    assert _device_size(publish) == 24 << 20
    assert driver.calls("NodeExpandVolume") == 2
    n.vm.remove_pod("e1")
    assert await n.vm.wait_for_unmount("e1", 30)
    await wait_for_async(
        "the loop device detached",
        lambda: not parts.loop_devices_under(driver.state),
        60.0,
        0.05,
    )


async def test_block_volume_mode_mismatches_refused(env):
    """Upstream's messages: a Block claim in volumeMounts, a Filesystem claim
    in volumeDevices; nothing is staged or published for either."""
    root, driver, api, node = env
    api.bind("claim-b", "pv-b", driver.create_volume("pv-b", block=True), volume_mode="Block")
    api.bind("claim-f", "pv-f", driver.create_volume("pv-f"))
    n = await node()
    mounts_block = pod("m1", claim_vol("data", "claim-b"))
    mounts_block["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/d"}]
    n.vm.add_pod(mounts_block)
    n.vm.add_pod(block_pod("m2", "claim-f"))
    await wait_for_async("both refused", lambda: len(set(n.events)) >= 2, 60.0, 0.05)
    assert set(n.events) == {
        'MountVolume.SetUp failed for volume "data" : volume data has volumeMode Block, '
        "but is specified in volumeMounts",
        'MountVolume.SetUp failed for volume "data" : volume data has volumeMode Filesystem, '
        "but is specified in volumeDevices",
    }
    assert driver.calls("NodeStageVolume") == 0 and driver.calls("NodePublishVolume") == 0
    assert not (root / "pods" / "m1" / "volumes").exists() or not any(
        (root / "pods" / "m1" / "volumes").rglob("vol_data.json")
    )


async def test_block_claim_on_a_volume_the_driver_cannot_map(env):
    """A driver that refuses block access (here: the volume is not a block
    volume) fails NodeStage: upstream's MapVolume.SetUpDevice event, nothing
    left staged."""
    root, driver, api, node = env
    api.bind("claim-x", "pv-x", driver.create_volume("pv-x"), volume_mode="Block")
    n = await node()
    n.vm.add_pod(block_pod("x1", "claim-x"))
    await wait_for_async("the refusal", lambda: n.events, 60.0, 0.05)
    assert n.events[0].startswith(
        'MapVolume.SetUpDevice failed for volume "pv-x" : rpc error: code = InvalidArgument '
    )
    assert "access type must be mount" in n.events[0]
    staging, _publish, record = block_paths(root, "pv-x", "x1")
    assert not staging.exists() and not record.exists()
    assert parts.loop_devices_under(driver.state) == []


async def test_block_volume_adopted_after_restart_and_orphan_unmapped(env):
    root, driver, api, node = env
    for name in ("bkeep", "bgone"):
        h = driver.create_volume(f"pv-{name}", size=4 << 20, block=True)
        api.bind(f"claim-{name}", f"pv-{name}", h, volume_mode="Block")
    first = await node()
    kept, gone = block_pod("k1", "claim-bkeep"), block_pod("g1", "claim-bgone")
    for p in (kept, gone):
        first.vm.add_pod(p)
    await wait_for_async(
        "both pods' volumes mapped",
        lambda: not first.vm.unmounted_volumes(kept) and not first.vm.unmounted_volumes(gone),
        60.0,
        0.05,
    )
    await first.shutdown()
    publishes, stages = driver.calls("NodePublishVolume"), driver.calls("NodeStageVolume")
    assert len(parts.loop_devices_under(driver.state)) == 2

    second = await node()
    second.vm.add_pod(kept)
    await all_mounted(second.vm, kept)
    assert await second.vm.cleanup_orphaned_pods({"k1"}) == []
    assert await second.vm.wait_for_unmount("g1", 30)
    assert driver.calls("NodePublishVolume") == publishes  # adopted, not published again
    assert driver.calls("NodeStageVolume") == stages
    vol = second.vm.get_mounted_volumes("k1")["data"]
    _s, publish, _r = block_paths(root, "pv-bkeep", "k1")
    assert vol.block and vol.host_path == str(publish)
    gone_staging, gone_publish, _r = block_paths(root, "pv-bgone", "g1")
    await wait_for_async("the orphan unstaged", lambda: not gone_staging.exists(), 60.0, 0.05)
    assert not gone_publish.exists()
    assert len(parts.loop_devices_under(driver.state)) == 1
    keep_handle = api.objects["/api/v1/persistentvolumes/pv-bkeep"]["spec"]["csi"]["volumeHandle"]
    assert second.csi.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^{keep_handle}"]
    # Whether a block volume is still staged cannot be read off the disk (a
    # reboot detaches it): the next pod to use it stages it again first.
    other = block_pod("k2", "claim-bkeep")
    second.vm.add_pod(other)
    await all_mounted(second.vm, other)
    assert driver.calls("NodeStageVolume") == stages + 1
    for uid in ("k1", "k2"):
        second.vm.remove_pod(uid)
        assert await second.vm.wait_for_unmount(uid, 30)
    await wait_for_async(
        "every loop device detached",
        lambda: not parts.loop_devices_under(driver.state),
        60.0,
        0.05,
    )
