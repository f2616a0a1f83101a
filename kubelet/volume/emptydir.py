"""emptyDir volumes (pkg/volume/emptydir upstream): a directory under the pod's
volumes dir on the node's disk, or a tmpfs for `medium: Memory`.

The tmpfs is sized as upstream does: node allocatable memory, lowered to the
pod's memory limit (when every container has one) and to `sizeLimit` when
those are smaller. Whether this kubelet may mount at all is found out by the
mount itself: without CAP_SYS_ADMIN in the host mount namespace the volume
fails with a FailedMount that says so. `HugePages` and `HugePages-<size>` media
are a hugetlbfs of the page size the pod requests huge pages of, as upstream.
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
MEDIUM_HUGEPAGES = "HugePages"
HUGEPAGES_RESOURCE = "hugepages-"


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
        medium = _medium(spec)
        if medium == MEDIUM_MEMORY:
            return mounted_fstype == "tmpfs"
        if medium.startswith(MEDIUM_HUGEPAGES):
            return mounted_fstype == "hugetlbfs"
        return True

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        medium = _medium(spec)
        options = ""
        if medium == MEDIUM_MEMORY:
            options = f"size={tmpfs_size(pod, spec, self._allocatable())}"
        elif medium.startswith(MEDIUM_HUGEPAGES):
            options = f"pagesize={hugepage_size(pod, medium)}"
        elif medium != MEDIUM_DEFAULT:
            raise VolumeError(f'unknown storage medium "{medium}"')
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._set_up, dir, medium, options, fs_group)

    def _set_up(self, dir: str, medium: str, options: str, fs_group: int | None) -> None:
        try:
            _setup_dir(dir)
        except OSError as err:
            raise VolumeError(mountutil.go_path_error("mkdir", err)) from err
        what = f"emptyDir medium {medium}"
        if medium == MEDIUM_MEMORY:
            options = "" if options == "size=0" else options  # 0: the kernel's default
            volume_util.ensure_mounted(dir, "tmpfs", "tmpfs", options, what, self._mountinfo)
        elif medium:
            volume_util.ensure_mounted(dir, "nodev", "hugetlbfs", options, what, self._mountinfo)
        if fs_group is not None:
            _set_ownership(dir, int(fs_group))

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._tear_down, dir)

    def _tear_down(self, dir: str) -> None:
        # The medium comes from the mount table, not the spec: after a restart
        # the spec of an orphaned pod is unknown.
        volume_util.unmount_and_remove(dir, "unlinkat")


def hugepage_size(pod: Pod, medium: str) -> str:
    """The page size of a HugePages emptyDir, from the pod's huge page requests
    (its containers', init containers' and pod-level): the medium's own size,
    requested by the pod; or, for plain `HugePages`, the one size it requests."""
    want = medium[len(MEDIUM_HUGEPAGES) + 1 :] if medium != MEDIUM_HUGEPAGES else ""
    if medium != MEDIUM_HUGEPAGES and (not medium.startswith(MEDIUM_HUGEPAGES + "-") or not want):
        raise VolumeError(f'unknown storage medium "{medium}"')
    spec = pod["spec"]
    lists = [(c.get("resources") or {}).get("requests") or {}
             for c in [*spec.get("containers", []), *spec.get("initContainers", [])]]  # fmt: skip
    lists.append((spec.get("resources") or {}).get("requests") or {})
    sizes = {name[len(HUGEPAGES_RESOURCE) :] for requests in lists for name in requests
             if name.startswith(HUGEPAGES_RESOURCE)}  # fmt: skip
    try:
        found = _page_sizes(sizes, want, medium)
    except ValueError as err:  # a size that is no quantity
        raise VolumeError(f'unknown storage medium "{medium}": {err}') from err
    if not found:
        raise VolumeError(
            f"medium {medium}: hugePages storage requested, but there is no resource request "
            "for huge pages"
        )
    return found[0]


def _page_sizes(sizes: set[str], want: str, medium: str) -> list[str]:
    if want:
        return [s for s in sizes if to_bytes(s) == to_bytes(want)]
    if len({to_bytes(s) for s in sizes}) > 1:
        raise VolumeError(
            f"medium: {medium} can't be used if container requests multiple huge page sizes"
        )
    return sorted(sizes)


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
