"""The global (staging) mount of each persistent CSI volume on this node,
shared by every pod that uses the volume (MountDevice / UnmountDevice
upstream), and the node's volumes in use.

A volume is staged once, before its first pod's NodePublish, and unstaged
when its last pod's volume has been torn down. The users of a volume are the
pod volume dirs that name it in their vol_data.json: known from set-ups, and
after a restart from the disk, so a volume staged before the restart is
neither staged again nor left behind. Operations on one volume are serialised.

In use: every persistent volume with a user or a staging mount, by its unique
name (`kubernetes.io/csi/<driver>^<handle>`), which the node status reports as
volumesInUse so the attach-detach controller never detaches it underneath.
A volume that needs attaching is staged only once a node status carrying it
has been written (upstream's "reported in use").
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kubelet.util import mountutil
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.volume import VolumeError
from kubelet.volume.csi import PLUGIN_NAME, paths
from kubelet.volume.csi.client import CSIClient, CSIError

log = logging.getLogger(__name__)

User = tuple[str, str]  # (pod uid, volume dir name)
VolumeKey = tuple[str, str]  # (driver, volume handle)

UNSTAGE_RETRY_INITIAL = 0.5
UNSTAGE_RETRY_MAX = 122.0


def unique_name(driver: str, handle: str) -> str:
    return f"{PLUGIN_NAME}/{driver}^{handle}"


@dataclass
class StagedVolume:
    driver: str
    handle: str
    # A raw block volume is staged at a path named after its PV, not its handle.
    block_pv: str = ""
    users: set[User] = field(default_factory=set)
    # NodeStage succeeded, or may have (a timeout), or the mount was found on disk.
    staged: bool = False
    staging_path: str = ""
    publish_context: dict[str, str] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Unstaging failed: retried at this monotonic time.
    retry_at: float = 0.0
    retry_delay: float = 0.0


# Stages a volume: (staging path) -> publish context. Given by the plugin.
StageFn = Callable[[str], Awaitable[dict[str, str]]]


class StagingManager:
    def __init__(
        self,
        root_dir: str,
        report_needed: Callable[[], None] = lambda: None,
        clock: Clock = REAL_CLOCK,
        mountinfo: str = mountutil.MOUNTINFO,
    ) -> None:
        self.root_dir = root_dir
        # A staging waits for a node status carrying its volume: write one now
        # rather than at the next period (only then: others wait for nothing).
        self.report_needed = report_needed
        self.clock = clock
        self.mountinfo = mountinfo
        self.volumes: dict[VolumeKey, StagedVolume] = {}
        self._reported: set[str] = set()
        self._reported_changed = asyncio.Event()
        self.wake = asyncio.Event()  # a retry became due

    # ----------------------------------------------------------- in use

    def in_use(self) -> list[str]:
        return sorted(unique_name(d, h) for (d, h) in self.volumes)

    def mark_reported(self, names: list[str]) -> None:
        """The node status that was just written carries these volumes."""
        self._reported = set(names)
        self._reported_changed.set()
        self._reported_changed = asyncio.Event()

    async def wait_reported(self, driver: str, handle: str, timeout: float) -> None:
        name = unique_name(driver, handle)
        deadline = self.clock.monotonic() + timeout
        if name not in self._reported:
            self.report_needed()
        while name not in self._reported:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise VolumeError(
                    f"volume {name} has not yet been added to the list of VolumesInUse "
                    "in the node's volume status"
                )
            try:
                await asyncio.wait_for(self._reported_changed.wait(), left)
            except TimeoutError:
                pass

    # ------------------------------------------------------------ users

    def _entry(self, driver: str, handle: str, block_pv: str) -> StagedVolume:
        key = (driver, handle)
        v = self.volumes.get(key)
        if v is None:
            v = self.volumes[key] = StagedVolume(driver, handle, block_pv)
        return v

    def add_user(self, driver: str, handle: str, user: User, block_pv: str = "") -> StagedVolume:
        v = self._entry(driver, handle, block_pv)
        v.users.add(user)
        return v

    def used_by_another_pod(self, driver: str, handle: str, uid: str) -> bool:
        v = self.volumes.get((driver, handle))
        return v is not None and any(u != uid for u, _ in v.users)

    def found_staged(self, driver: str, handle: str, staging_path: str, block_pv: str = "") -> None:
        """A staging dir with its vol_data.json found on disk at start."""
        v = self._entry(driver, handle, block_pv)
        v.staged, v.staging_path = True, staging_path

    async def stage(
        self, v: StagedVolume, client: CSIClient, stage: StageFn
    ) -> tuple[str, dict[str, str]]:
        """Stage the volume unless it is: (staging path or "", publish context)."""
        async with v.lock:
            if v.staged and v.staging_path:
                return v.staging_path, v.publish_context
            path = self._staging_path(v)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._prepare_staging_dir, v, path)
            try:
                v.publish_context = await stage(path)
            except CSIError as err:
                if err.final:
                    await loop.run_in_executor(None, self._remove_staging_dirs, v, path)
                else:
                    v.staged, v.staging_path = True, path  # may be staged: unstage later
                raise
            except VolumeError:
                await loop.run_in_executor(None, self._remove_staging_dirs, v, path)
                raise
            v.staged, v.staging_path = True, path
            return path, v.publish_context

    def set_publish_context(self, v: StagedVolume, ctx: dict[str, str]) -> None:
        v.publish_context = ctx

    async def remove_user(
        self, driver: str, handle: str, user: User, client: CSIClient | None
    ) -> None:
        """The user's volume dir is torn down: unstage once no user is left.
        A failed unstage is retried by retry_unstage(); the caller's tear-down
        has succeeded either way."""
        v = self.volumes.get((driver, handle))
        if v is None:
            return
        v.users.discard(user)
        if v.users:
            return
        try:
            await self._unstage(v, client)
        except VolumeError as err:
            self._schedule_retry(v, err)

    async def _unstage(self, v: StagedVolume, client: CSIClient | None) -> None:
        async with v.lock:
            if v.users or self.volumes.get((v.driver, v.handle)) is not v:
                return  # a new user came while waiting for the lock
            if v.staged:
                if client is None:
                    raise VolumeError(f"driver {v.driver} is not registered: cannot unstage")
                path = v.staging_path or self._staging_path(v)
                await client.node_unstage(v.handle, path)
                await asyncio.get_running_loop().run_in_executor(
                    None, self._remove_staging_dirs, v, path
                )
                v.staged = False
                log.info("Volume %s unstaged from %s", unique_name(v.driver, v.handle), path)
            del self.volumes[(v.driver, v.handle)]

    def _schedule_retry(self, v: StagedVolume, err: Exception) -> None:
        v.retry_delay = (
            UNSTAGE_RETRY_INITIAL
            if not v.retry_delay
            else min(v.retry_delay * 2, UNSTAGE_RETRY_MAX)
        )
        v.retry_at = self.clock.monotonic() + v.retry_delay
        log.warning("UnmountDevice of %s failed (retry in %.1fs): %s",
                    unique_name(v.driver, v.handle), v.retry_delay, err)  # fmt: skip
        self.wake.set()

    async def retry_unstage(self, client_for: Callable[[str], CSIClient | None]) -> float | None:
        """Unstage the unused volumes that are due; seconds until the next is due."""
        now = self.clock.monotonic()
        nxt: float | None = None
        for v in list(self.volumes.values()):
            if v.users:
                continue
            if v.retry_at > now:
                nxt = v.retry_at if nxt is None else min(nxt, v.retry_at)
                continue
            try:
                await self._unstage(v, client_for(v.driver))
                v.retry_delay = 0.0
            except VolumeError as err:
                self._schedule_retry(v, err)
                nxt = v.retry_at if nxt is None else min(nxt, v.retry_at)
        return None if nxt is None else max(0.0, nxt - self.clock.monotonic())

    # ------------------------------------------------------------ disk

    def _staging_path(self, v: StagedVolume) -> str:
        return paths.staging_path(self.root_dir, v.driver, v.handle, v.block_pv)

    def _prepare_staging_dir(self, v: StagedVolume, path: str) -> None:
        # The CO makes the staging target dir; a vol_data.json says whose it
        # is, for the tear-down after a restart (beside it, or for a block
        # volume under volumeDevices/<pv>/data, as upstream).
        os.makedirs(path, mode=0o750, exist_ok=True)
        record = os.path.dirname(path)
        if v.block_pv:
            record = paths.block_data_dir(self.root_dir, v.block_pv)
            os.makedirs(record, mode=0o750, exist_ok=True)
        paths.save_vol_data(record, {paths.VOLUME_HANDLE: v.handle, paths.DRIVER_NAME: v.driver})

    def _remove_staging_dirs(self, v: StagedVolume, path: str) -> None:
        if v.block_pv:
            paths.remove_block_dirs(self.root_dir, v.block_pv, self.mountinfo)
        else:
            paths.remove_mount_dir(path, self.mountinfo)
