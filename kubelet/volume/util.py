"""Mount steps of volume set-up and tear-down that fail with the texts
upstream's events carry (pkg/volume/util). Blocking: callers run them in an
executor."""

from __future__ import annotations

import errno
import os

from kubelet.util import mountutil
from kubelet.volume import VolumeError


def unmount_and_remove(dir: str, op: str) -> None:
    """Unmount `dir` if something is mounted there, then remove it without ever
    crossing into another filesystem. VolumeError with upstream's texts; `op` is
    the syscall the removal error names (unlinkat, remove)."""
    if not os.path.lexists(dir):
        return
    if mountutil.is_mount_point(dir):
        try:
            mountutil.umount(dir)
        except OSError as err:
            raise VolumeError(
                f"unmount failed: {mountutil.lowercase_strerror(err)}\nUnmounting arguments: {dir}"
            ) from err
    try:
        mountutil.remove_all_one_filesystem(dir)
    except OSError as err:
        raise VolumeError(mountutil.go_path_error(op, err)) from err


def ensure_tmpfs(dir: str, size: int, what: str, mountinfo: str = mountutil.MOUNTINFO) -> None:
    """Mount a tmpfs at `dir` unless one is there already (set_up is idempotent).
    VolumeError naming `what` when this kubelet may not mount here."""
    ensure_mounted(dir, "tmpfs", "tmpfs", f"size={size}" if size > 0 else "", what, mountinfo)


def ensure_mounted(
    dir: str,
    source: str,
    fstype: str,
    options: str,
    what: str,
    mountinfo: str = mountutil.MOUNTINFO,
) -> None:
    """Mount `fstype` at `dir` unless a mount of that type is there already.
    The mount table is read only when something is mounted at `dir`: a pod's
    first set-up must not cost a line per mount on the node."""
    if mountutil.is_mount_point(dir) and mountutil.fstype_at(dir, mountinfo) == fstype:
        return
    try:
        mountutil.mount(source, dir, fstype, options)
    except OSError as err:
        if err.errno in (errno.EPERM, errno.EACCES):
            raise VolumeError(
                f"{what} needs a {fstype} mount at {dir}, which this kubelet is not permitted "
                f"to make here ({mountutil.lowercase_strerror(err)}: it needs CAP_SYS_ADMIN in the "
                "host mount namespace)"
            ) from err
        raise VolumeError(
            f"mount failed: {mountutil.lowercase_strerror(err)}\n"
            f"Mounting command: mount\nMounting arguments: -t {fstype} -o {options} {source} {dir}"
        ) from err
