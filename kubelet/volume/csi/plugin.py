"""The CSI volume plugin (csi_plugin.go, csi_mounter.go upstream).

set_up_at: record the volume in `<dir>/vol_data.json`, stage it once for the
node if it is persistent and the driver stages (waiting for attach first when
the driver requires it), then NodePublish it at `<dir>/mount` and apply the
pod's fsGroup when the driver leaves that to the kubelet. tear_down:
NodeUnpublish, remove the dirs (never what is in them), and unstage once the
last pod using the volume is done. After a restart, reconstruct() reads the
disk first, so mounted volumes are adopted and the staged ones counted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kubelet.client.rest import APIClient
from kubelet.token.manager import TokenManager
from kubelet.types import PersistentVolume, Pod
from kubelet.util import mountutil
from kubelet.volume import MountedVolume, VolumeError, VolumeHost, VolumeSpec, ownership
from kubelet.volume.csi import PLUGIN_NAME, attach, csidriver, paths, requests, source
from kubelet.volume.csi.api import csi_pb2 as pb
from kubelet.volume.csi.client import (
    GET_VOLUME_STATS,
    SINGLE_NODE_MULTI_WRITER,
    STAGE_UNSTAGE,
    VOLUME_MOUNT_GROUP,
    CSIClient,
    CSIError,
)
from kubelet.volume.csi.drivers import DriversStore
from kubelet.volume.csi.expand import VOLUME_RESIZE_FAILED, Expander
from kubelet.volume.csi.source import CSIVolume
from kubelet.volume.csi.staging import StagedVolume, StagingManager
from kubelet.volume.metrics import VOLUME_METRIC_COLLECTION_DURATION, VolumeUsage

log = logging.getLogger(__name__)

# How long a staging waits for the node status to carry the volume in volumesInUse.
REPORT_TIMEOUT = 60.0


@dataclass(frozen=True)
class FoundDir:
    """A pod's CSI volume dir found on disk at start."""

    data: dict[str, str]
    mounted: bool


class CSIPlugin:
    name = PLUGIN_NAME
    # Remounts re-check expansion and republish for drivers that ask to.
    requires_remount = True
    # Not read-only as a plugin: each volume's readOnly is in its MountedVolume.
    read_only = False
    selinux_relabel = False

    def __init__(
        self,
        host: VolumeHost,
        drivers: DriversStore,
        csidrivers: csidriver.CSIDrivers,
        staging: StagingManager,
        api: APIClient | None,
        tokens: TokenManager | None = None,
        mountinfo: str = mountutil.MOUNTINFO,
        expander: Expander | None = None,
        volume_health: bool = False,
    ) -> None:
        self.host = host
        self.root = os.path.realpath(host.root_dir)
        self.drivers = drivers
        self.csidrivers = csidrivers
        self.staging = staging
        self.api = api
        self.tokens = tokens
        self.mountinfo = mountinfo
        self.expander = expander
        # CSIVolumeHealth: report the driver's volume condition in the summary.
        self.volume_health = volume_health
        self._found: dict[str, FoundDir] = {}
        self._warned: set[str] = set()

    def can_support(self, spec: VolumeSpec) -> bool:
        return source.is_csi_spec(spec)

    # ------------------------------------------------------------- set-up

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        await self.set_up_at(pod, spec, dir, remount=False)

    async def set_up_at(self, pod: Pod, spec: VolumeSpec, dir: str, remount: bool) -> MountedVolume:
        vol = source.from_spec(pod, spec)
        if os.path.basename(dir) != vol.dir_name:
            raise VolumeError(f"CSI volume dir {dir} does not match volume {vol.dir_name}")
        block = vol.volume_mode == paths.BLOCK
        target = (
            paths.block_publish_path(self.root, vol.dir_name, _uid(pod))
            if block
            else os.path.join(dir, paths.TARGET)
        )
        mounted = MountedVolume(
            name=str(spec["name"]), host_path=target, read_only=vol.read_only, block=block
        )
        driver = await self.csidrivers.get(vol.driver)
        if remount:
            await self._remount(pod, vol, driver, target)
            return mounted
        modes = csidriver.lifecycle_modes(driver)
        if vol.mode not in modes:
            why = " (no CSIDriver object)" if driver is None else f" (only supports {modes})"
            raise VolumeError(f'volume mode "{vol.mode}" not supported by driver {vol.driver}{why}')
        # The scheduler enforces ReadWriteOncePod too, but a pod bound by
        # nodeName skips it; checked before anything of this pod is on disk.
        if vol.access_modes == ("ReadWriteOncePod",) and self.staging.used_by_another_pod(
            vol.driver, vol.handle, _uid(pod)
        ):
            raise VolumeError(
                "volume uses the ReadWriteOncePod access mode and is already in use by another pod"
            )
        policy = csidriver.fs_group_policy(driver)
        client = self.drivers.client(vol.driver)
        caps = await client.node_capabilities()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._write_vol_data, dir, vol)
        if block:
            await self._map(pod, vol, driver, client, caps, target)
            await self._expand(pod, vol, target, spec.get("persistentVolume"))
            return mounted
        staging_path, ctx = "", dict[str, str]()
        if vol.persistent:
            staged = self.staging.add_user(vol.driver, vol.handle, (_uid(pod), vol.dir_name))
            staging_path, ctx = await self._stage(pod, vol, driver, client, caps, staged)
        await self._publish(pod, vol, driver, client, caps, staging_path, ctx, target)
        fs_group = requests.fs_group_of(pod)
        if VOLUME_MOUNT_GROUP not in caps and requests.applies_fs_group(vol, fs_group, policy):
            assert fs_group is not None
            change = ((pod.get("spec") or {}).get("securityContext") or {}).get(
                "fsGroupChangePolicy"
            )
            await loop.run_in_executor(
                None, ownership.set_volume_ownership, target, fs_group, change
            )
        await self._expand(pod, vol, target, spec.get("persistentVolume"))
        self._warn_unimplemented(vol.driver, driver)
        return mounted

    async def _map(
        self,
        pod: Pod,
        vol: CSIVolume,
        driver: csidriver.CSIDriverSpec | None,
        client: CSIClient,
        caps: frozenset[int],
        publish: str,
    ) -> None:
        """A raw block volume (csi_block.go's SetUpDevice and MapPodDevice):
        staged at volumeDevices/staging/<pv>, published as the file
        volumeDevices/publish/<pv>/<pod uid>, which must then be a block
        device; that device is what the containers' volumeDevices get."""
        uid = _uid(pod)
        staged = self.staging.add_user(vol.driver, vol.handle, (uid, vol.dir_name), vol.pv_name)
        try:
            staging_path, ctx = await self._stage(pod, vol, driver, client, caps, staged)
        except VolumeError as err:
            raise VolumeError(str(err), "MapVolume.SetUpDevice") from err
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, _make_publish_dir, publish)
            await self._publish(pod, vol, driver, client, caps, staging_path, ctx, publish)
            if not await loop.run_in_executor(None, paths.is_block_device, publish):
                raise VolumeError(f"{publish} is not a block device after NodePublishVolume")
        except VolumeError as err:
            raise VolumeError(str(err), "MapVolume.MapPodDevice") from err
        link = paths.pod_device_link(self.root, uid, vol.dir_name)
        try:
            await loop.run_in_executor(None, paths.make_pod_device_link, link, publish)
        except (OSError, VolumeError) as err:
            raise VolumeError(str(err), "MapVolume.MapBlockVolume") from err

    def _write_vol_data(self, dir: str, vol: CSIVolume) -> None:
        os.makedirs(dir, mode=0o750, exist_ok=True)
        node = self.host.node_name
        data = {
            paths.SPEC_VOL_ID: vol.dir_name,
            paths.VOLUME_HANDLE: vol.handle,
            paths.DRIVER_NAME: vol.driver,
            paths.NODE_NAME: node,
            paths.ATTACHMENT_ID: paths.attachment_name(vol.handle, vol.driver, node),
            paths.LIFECYCLE_MODE: vol.mode,
        }
        if vol.volume_mode == paths.BLOCK:
            data[paths.VOLUME_MODE] = paths.BLOCK
        paths.save_vol_data(dir, data)

    async def _stage(
        self,
        pod: Pod,
        vol: CSIVolume,
        driver: csidriver.CSIDriverSpec | None,
        client: CSIClient,
        caps: frozenset[int],
        staged: StagedVolume,
    ) -> tuple[str, dict[str, str]]:
        """(staging path, publish context) for a persistent volume."""
        # The attachment's metadata is every publish's context, so it is read
        # for each pod (after a restart too), not only for the staging.
        ctx = await self._attach(vol) if csidriver.attach_required(driver) else {}
        if STAGE_UNSTAGE not in caps:
            return "", ctx

        async def stage(path: str) -> dict[str, str]:
            group = requests.fs_group_of(pod)
            mount_group = str(group) if group is not None and VOLUME_MOUNT_GROUP in caps else ""
            req = pb.NodeStageVolumeRequest(
                volume_id=vol.handle,
                publish_context=ctx,
                staging_target_path=path,
                volume_capability=requests.capability(
                    vol, SINGLE_NODE_MULTI_WRITER in caps, mount_group
                ),
                secrets=await requests.secrets(self.api, vol.stage_secret, "NodeStageSecretRef"),
                volume_context=vol.attributes,
            )
            await client.node_stage(req)
            log.info("Volume %s staged at %s", vol.handle, path)
            return ctx

        path, _ = await self.staging.stage(staged, client, stage)
        return path, ctx

    async def _attach(self, vol: CSIVolume) -> dict[str, str]:
        if self.api is None:
            raise VolumeError(f"volume {vol.handle} needs attaching, which needs an API server")
        await self.staging.wait_reported(vol.driver, vol.handle, REPORT_TIMEOUT)
        return await attach.wait_for_attach(self.api, vol.driver, vol.handle, self.host.node_name)

    async def _publish(
        self,
        pod: Pod,
        vol: CSIVolume,
        driver: csidriver.CSIDriverSpec | None,
        client: CSIClient,
        caps: frozenset[int],
        staging_path: str,
        ctx: dict[str, str],
        target: str,
    ) -> None:
        group = requests.fs_group_of(pod)
        mount_group = str(group) if group is not None and VOLUME_MOUNT_GROUP in caps else ""
        req = pb.NodePublishVolumeRequest(
            volume_id=vol.handle,
            publish_context=ctx,
            staging_target_path=staging_path,
            target_path=target,
            volume_capability=requests.capability(
                vol, SINGLE_NODE_MULTI_WRITER in caps, mount_group
            ),
            readonly=vol.read_only,
            secrets=await requests.secrets(self.api, vol.publish_secret, "NodePublishSecretRef"),
            volume_context=await requests.volume_context(pod, vol, driver, self.tokens),
        )
        try:
            await client.node_publish(req)
        except CSIError as err:
            if err.final:
                # Nothing is mounted: the target the driver may have made goes;
                # vol_data.json stays for the tear-down to find the volume by.
                await asyncio.get_running_loop().run_in_executor(
                    None, self._remove_target, target, vol.volume_mode == paths.BLOCK
                )
            raise

    def _remove_target(self, target: str, block: bool) -> None:
        if block:
            try:
                paths.remove_block_target(target)
            except VolumeError as err:
                log.warning("Could not remove %s after a failed NodePublish: %s", target, err)
            return
        if paths.is_mount_point(target) or paths.mounts_below(target, self.mountinfo):
            return
        try:
            os.rmdir(target)
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("Could not remove %s after a failed NodePublish: %s", target, err)

    async def _remount(
        self, pod: Pod, vol: CSIVolume, driver: csidriver.CSIDriverSpec | None, target: str
    ) -> None:
        """The periodic call on a mounted volume: finish a pending expansion."""
        try:
            await self._expand(pod, vol, target)
        except VolumeError as err:  # in use: a failed resize, not a failed mount
            raise VolumeError(str(err), err.operation, VOLUME_RESIZE_FAILED) from err

    async def _expand(
        self, pod: Pod, vol: CSIVolume, target: str, pv: PersistentVolume | None = None
    ) -> None:
        # Once set up (with the PV the claim was just resolved to) and on each
        # remount, for either volume mode: upstream's expansion during mount /
        # map, then its in-use expansion.
        if self.expander is not None and vol.persistent:
            await self.expander.expand(pod, vol, target, pv)

    def _warn_unimplemented(self, name: str, driver: csidriver.CSIDriverSpec | None) -> None:
        if name in self._warned:
            return
        self._warned.add(name)
        if csidriver.requires_republish(driver):
            log.warning(
                "CSIDriver %s sets requiresRepublish: this kubelet does not call NodePublishVolume "
                "again on mounted volumes (not implemented yet)", name,
            )  # fmt: skip
        if (driver or {}).get("seLinuxMount"):
            log.warning(
                "CSIDriver %s sets seLinuxMount: this kubelet does not pass SELinux mount "
                "options (not implemented yet)", name,
            )  # fmt: skip

    # ---------------------------------------------------------- tear-down

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        loop = asyncio.get_running_loop()
        target = os.path.join(dir, paths.TARGET)
        try:
            data = await loop.run_in_executor(None, paths.load_vol_data, dir)
        except FileNotFoundError:
            # No record: a set-up that failed before writing it published nothing.
            await loop.run_in_executor(None, paths.remove_mount_dir, target, self.mountinfo)
            return
        driver, handle = data[paths.DRIVER_NAME], data.get(paths.VOLUME_HANDLE, "")
        block = data.get(paths.VOLUME_MODE) == paths.BLOCK
        if block:
            target = paths.block_publish_path(self.root, os.path.basename(dir), pod_uid)
        d = self.drivers.get(driver)
        if d is not None:
            await d.client.node_unpublish(handle, target)
        elif await loop.run_in_executor(None, os.path.lexists, target):
            raise VolumeError(
                f"kubernetes.io/csi: driver name {driver} not found in the list of registered "
                "CSI drivers: cannot unpublish"
            )
        if block:
            link = paths.pod_device_link(self.root, pod_uid, os.path.basename(dir))
            await loop.run_in_executor(None, paths.remove_pod_device_link, link)
            await loop.run_in_executor(None, paths.remove_block_target, target)
            await loop.run_in_executor(None, paths.remove_record, dir)
        else:
            await loop.run_in_executor(None, paths.remove_mount_dir, target, self.mountinfo)
        self._found.pop(dir, None)
        if self.expander is not None:
            self.expander.forget(target)
        if data.get(paths.LIFECYCLE_MODE, paths.PERSISTENT) == paths.PERSISTENT:
            user = (pod_uid, os.path.basename(dir))
            await self.staging.remove_user(driver, handle, user, d.client if d else None)

    # -------------------------------------------------------------- stats

    def volume_stats(
        self, name: str, path: str
    ) -> Callable[[], Coroutine[Any, Any, VolumeUsage | None]] | None:
        """The query of a CSI volume's usage from its driver, None for other
        volumes. A block volume's is asked at its publish file (upstream asks
        at its global map path, which this kubelet does not make)."""
        if os.path.basename(path) == paths.TARGET:
            if os.path.basename(os.path.dirname(os.path.dirname(path))) != _ESCAPED_PLUGIN:
                return None
            return functools.partial(self._stats, name, path, os.path.dirname(path))
        pv_dir, uid = os.path.split(path)
        publish_root, pv = os.path.split(pv_dir)
        if publish_root != os.path.join(paths.block_dir(self.root), "publish"):
            return None
        record = os.path.join(self.root, "pods", uid, "volumes", _ESCAPED_PLUGIN, pv)
        return functools.partial(self._stats, name, path, record)

    async def _stats(self, name: str, path: str, record: str) -> VolumeUsage | None:
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, paths.load_vol_data, record)
        driver = data[paths.DRIVER_NAME]
        with VOLUME_METRIC_COLLECTION_DURATION.labels(driver).time():
            d = self.drivers.get(driver)
            if d is None or GET_VOLUME_STATS not in await d.client.node_capabilities():
                return None  # as upstream: no usage for a driver that does not report it
            st = await d.client.node_get_volume_stats(data.get(paths.VOLUME_HANDLE, ""), path)
        return VolumeUsage(
            name=name,
            used_bytes=st.used_bytes or 0,
            inodes_used=st.inodes_used or 0,
            capacity_bytes=st.capacity_bytes or 0,
            available_bytes=st.available_bytes or 0,
            inodes=st.inodes or 0,
            inodes_free=st.inodes_free or 0,
            abnormal=st.abnormal if self.volume_health else None,
        )

    # ----------------------------------------------------- reconstruction

    def adopt(self, spec: VolumeSpec, dir: str) -> MountedVolume | None:
        found = self._found.get(dir)
        if found is None or not found.mounted:
            return None
        # Only the pod's UID is known from the dir; no spec is read.
        pod: Pod = {
            "metadata": {"uid": _pod_uid_of(dir, self.host.root_dir)},
            "spec": {"containers": []},
        }
        try:
            vol = source.from_spec(pod, spec)
        except VolumeError:
            return None
        d = found.data
        if d.get(paths.DRIVER_NAME) != vol.driver or d.get(paths.VOLUME_HANDLE) != vol.handle:
            return None
        block = d.get(paths.VOLUME_MODE) == paths.BLOCK
        if block != (vol.volume_mode == paths.BLOCK):
            return None
        uid = _pod_uid_of(dir, self.host.root_dir)
        return MountedVolume(
            name=str(spec["name"]),
            host_path=paths.block_publish_path(self.root, vol.dir_name, uid)
            if block
            else os.path.join(dir, paths.TARGET),
            read_only=vol.read_only,
            block=block,
        )

    async def reconstruct(self) -> None:
        """Read the CSI dirs on disk (before the volume manager's own pass)."""
        loop = asyncio.get_running_loop()
        pods, staged = await loop.run_in_executor(None, scan_disk, self.host.root_dir)
        for dir, found in pods.items():
            self._found[dir] = found
            if found.data.get(paths.LIFECYCLE_MODE, paths.PERSISTENT) == paths.PERSISTENT:
                uid = _pod_uid_of(dir, self.host.root_dir)
                name = os.path.basename(dir)
                self.staging.add_user(
                    found.data[paths.DRIVER_NAME],
                    found.data.get(paths.VOLUME_HANDLE, ""),
                    (uid, name),
                    name if found.data.get(paths.VOLUME_MODE) == paths.BLOCK else "",
                )
        for driver, handle, path, block_pv in staged:
            # A block volume's staging leaves no mount to tell whether it is
            # still staged (a reboot detaches it): unstaged if unused, and
            # staged again (NodeStage is idempotent) before its next publish.
            self.staging.found_staged(driver, handle, "" if block_pv else path, block_pv)
        log.info("CSI: %d pod volume dirs and %d staged volumes found on disk",
                 len(pods), len(staged))  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Unstage what no pod uses any more (left by failures or a restart)."""
        while not stop.is_set():
            self.staging.wake.clear()
            timeout = await self.staging.retry_unstage(self._client_or_none)
            waiters = {
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self.staging.wake.wait()),
                asyncio.ensure_future(self.drivers.changed.wait()),
            }
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()

    def _client_or_none(self, driver: str) -> CSIClient | None:
        d = self.drivers.get(driver)
        return d.client if d is not None else None


_ESCAPED_PLUGIN = PLUGIN_NAME.replace("/", "~")


def _uid(pod: Pod) -> str:
    return str(pod["metadata"]["uid"])


def _pod_uid_of(dir: str, root_dir: str) -> str:
    # <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>
    rel = os.path.relpath(dir, os.path.join(root_dir, "pods"))
    return rel.split("/", 1)[0]


# A staged volume found on disk: (driver, handle, staging path, PV name of a block volume).
Staged = tuple[str, str, str, str]


def scan_disk(root_dir: str) -> tuple[dict[str, FoundDir], list[Staged]]:
    """Pod CSI volume dirs with a readable vol_data.json (and whether their
    `mount` is mounted, or for a block volume whether its publish file is a
    block device), and staging dirs with theirs."""
    pods: dict[str, FoundDir] = {}
    escaped = PLUGIN_NAME.replace("/", "~")
    pods_root = os.path.join(root_dir, "pods")
    for uid in _subdirs(pods_root):
        vdir = os.path.join(pods_root, uid, "volumes", escaped)
        for name in _subdirs(vdir):
            dir = os.path.join(vdir, name)
            try:
                data = paths.load_vol_data(dir)
            except (FileNotFoundError, VolumeError) as err:
                log.warning("CSI volume dir %s has no usable vol_data.json: %s", dir, err)
                continue
            if data.get(paths.VOLUME_MODE) == paths.BLOCK:
                try:
                    publish = paths.block_publish_path(root_dir, name, uid)
                except VolumeError as err:
                    log.warning("CSI block volume dir %s left alone: %s", dir, err)
                    continue
                pods[dir] = FoundDir(data, paths.is_block_device(publish))
                continue
            pods[dir] = FoundDir(data, paths.is_mount_point(os.path.join(dir, paths.TARGET)))
    staged = _scan_block_staged(root_dir)
    pdir = paths.plugin_dir(root_dir)
    for driver in _subdirs(pdir):
        if driver == paths.VOLUME_DEVICES:
            continue
        for digest in _subdirs(os.path.join(pdir, driver)):
            dir = os.path.join(pdir, driver, digest)
            try:
                data = paths.load_vol_data(dir)
            except (FileNotFoundError, VolumeError):
                continue
            handle = data.get(paths.VOLUME_HANDLE, "")
            if data[paths.DRIVER_NAME] != driver or paths.handle_digest(handle) != digest:
                log.warning("Staging dir %s does not match its vol_data.json; left alone", dir)
                continue
            staged.append((driver, handle, os.path.join(dir, paths.GLOBAL_MOUNT), ""))
    return pods, staged


def _scan_block_staged(root_dir: str) -> list[Staged]:
    """Block volumes staged: volumeDevices/<pv>/data/vol_data.json with its
    volumeDevices/staging/<pv> still there."""
    out: list[Staged] = []
    bdir = paths.block_dir(root_dir)
    for pv in _subdirs(bdir):
        if pv in ("staging", "publish"):
            continue
        try:
            data = paths.load_vol_data(paths.block_data_dir(root_dir, pv))
        except (FileNotFoundError, VolumeError):
            continue
        staging = paths.block_staging_path(root_dir, pv)
        if os.path.isdir(staging):
            out.append((data[paths.DRIVER_NAME], data.get(paths.VOLUME_HANDLE, ""), staging, pv))
    return out


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _make_publish_dir(publish: str) -> None:
    # The CO makes the publish file's dir; the driver makes the file.
    os.makedirs(os.path.dirname(publish), mode=0o750, exist_ok=True)
