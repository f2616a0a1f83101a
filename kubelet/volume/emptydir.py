"""emptyDir volumes (pkg/volume/emptydir upstream): a directory under the pod's
volumes dir on the node's disk, or a tmpfs for `medium: Memory`.

The tmpfs is sized as upstream does: node allocatable memory, lowered to the
pod's memory limit (when every container has one) and to `sizeLimit` when
those are smaller. Whether this kubelet may mount at all is found out by the
mount itself: without CAP_SYS_ADMIN in the host mount namespace the volume
fails with a FailedMount that says so. HugePages media are not supported.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from kubelet.cm.cgroup_manager import pod_resources
from kubelet.types import Pod
from kubelet.util import filesystem, mountutil
from kubelet.util.quantity import to_bytes
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume import util as volume_util

PLUGIN_NAME = "kubernetes.io/empty-dir"
DEFAULT_PERM = 0o777
MEDIUM_DEFAULT = ""
MEDIUM_MEMORY = "Memory"


def tmpfs_size(pod: Pod, spec: VolumeSpec, node_allocatable_memory: int) -> int:
    """Bytes for the tmpfs of a Memory emptyDir (0: the kernel's default, half of RAM)."""
    size = node_allocatable_memory
    limit = pod_resources(pod).get("memory_limit", 0)
    pod_level = ((pod["spec"].get("resources") or {}).get("limits") or {}).get("memory")
    if pod_level:
        limit = to_bytes(pod_level)
    if limit > 0 and (size <= 0 or limit <= size):
        size = limit
    raw = (spec.get("emptyDir") or {}).get("sizeLimit")
    if raw is not None:
        want = to_bytes(raw)
        if want > 0 and (size <= 0 or want <= size):
            size = want
    return size


class EmptyDirPlugin:
    name = PLUGIN_NAME
    requires_remount = False
    read_only = False
    selinux_relabel = True

    def __init__(
        self,
        node_allocatable_memory: Callable[[], int] = lambda: 0,
        mountinfo: str = mountutil.MOUNTINFO,
    ) -> None:
        # Allocatable can change with the node's config: read it per set-up.
        self._allocatable = node_allocatable_memory
        self._mountinfo = mountinfo

    def can_support(self, spec: VolumeSpec) -> bool:
        return "emptyDir" in spec

    def can_adopt(self, spec: VolumeSpec, dir: str, mounted_fstype: str | None) -> bool:
        # After a reboot the dir of a Memory volume is there but its tmpfs is not.
        if _medium(spec) == MEDIUM_MEMORY:
            return mounted_fstype == "tmpfs"
        return True

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        medium = _medium(spec)
        if medium.startswith("HugePages"):
            raise VolumeError(f"emptyDir medium {medium!r} is not supported by this kubelet")
        if medium not in (MEDIUM_DEFAULT, MEDIUM_MEMORY):
            raise VolumeError(f'unknown storage medium "{medium}"')
        size = tmpfs_size(pod, spec, self._allocatable()) if medium == MEDIUM_MEMORY else 0
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._set_up, dir, medium, size, fs_group)

    def _set_up(self, dir: str, medium: str, size: int, fs_group: int | None) -> None:
        try:
            _setup_dir(dir)
        except OSError as err:
            raise VolumeError(mountutil.go_path_error("mkdir", err)) from err
        if medium == MEDIUM_MEMORY:
            volume_util.ensure_tmpfs(dir, size, "emptyDir medium Memory", self._mountinfo)
        if fs_group is not None:
            _set_ownership(dir, int(fs_group))

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._tear_down, dir)

    def _tear_down(self, dir: str) -> None:
        # The medium comes from the mount table, not the spec: after a restart
        # the spec of an orphaned pod is unknown.
        volume_util.unmount_and_remove(dir, "unlinkat", self._mountinfo)


def _medium(spec: VolumeSpec) -> str:
    return str((spec.get("emptyDir") or {}).get("medium") or "")


def _setup_dir(dir: str) -> None:
    # The plugin dirs above it as the pod's own dirs, 0750; the volume 0777.
    filesystem.mkdir_all(os.path.dirname(dir), 0o750)
    try:
        os.mkdir(dir, DEFAULT_PERM)
    except FileExistsError:
        pass
    # The kubelet's umask took bits off: chmod rather than touch the process umask.
    if os.lstat(dir).st_mode & 0o7777 != DEFAULT_PERM:
        os.chmod(dir, DEFAULT_PERM)


def _set_ownership(dir: str, gid: int) -> None:
    # SetVolumeOwnership upstream, for the volume's root (a new emptyDir holds
    # nothing else): group fsGroup, setgid so new files inherit it, group rwx.
    st = os.lstat(dir)
    if st.st_gid != gid:
        os.chown(dir, -1, gid)
    mode = (st.st_mode & 0o7777) | 0o2070
    if st.st_mode & 0o7777 != mode:
        os.chmod(dir, mode)
