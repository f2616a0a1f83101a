"""subPath bind mounts (util/subpath upstream). Blocking: run in an executor.

A subPath checked by path alone can be swapped for a symlink by a container
that has the volume mounted, between the check and the runtime's mount. So,
as upstream, the checked path is held open (O_PATH, opened component by
component without following symlinks) and that descriptor is bind-mounted
at `<pod dir>/volume-subpaths/<volume>/<container>/<index>`; the runtime
mounts that target, which nobody in a container can redirect. The targets
stay until the volume is torn down, when clean_subpaths unmounts them.
"""

from __future__ import annotations

import errno
import os
import stat

from kubelet.util import filesystem
from kubelet.volumemanager import mountutil

SUBPATH_DIR = "volume-subpaths"
MS_BIND = 4096


def target_path(pod_dir: str, volume: str, container: str, index: int) -> str:
    return os.path.join(
        pod_dir,
        SUBPATH_DIR,
        filesystem.component(volume, "volume name"),
        filesystem.component(container, "container name"),
        str(index),
    )


def bind_subpath(fd: int, pod_dir: str, volume: str, container: str, index: int) -> str:
    """Bind-mount the open subPath `fd` at its target; return the target.
    Raises OSError (EPERM where this kubelet may not mount)."""
    target = target_path(pod_dir, volume, container, index)
    held = os.fstat(fd)
    if mountutil.mount_fstype(target) is not None:
        try:
            if os.path.samestat(held, os.stat(target)):
                return target  # the same container restarted: already there
        except OSError:
            pass
        mountutil.umount(target)
    filesystem.mkdir_all(os.path.dirname(target), 0o750)
    created = False
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode) != stat.S_ISDIR(held.st_mode):
            _remove(target)  # left from a subPath of the other kind
    except FileNotFoundError:
        pass
    if not os.path.lexists(target):
        # A file is enough to mount any non-directory over.
        if stat.S_ISDIR(held.st_mode):
            os.mkdir(target, 0o750)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o640))
        created = True
    try:
        mountutil.mount(f"/proc/self/fd/{fd}", target, "", flags=MS_BIND)
    except OSError:
        if created:
            _remove(target)
        raise
    return target


def _remove(path: str) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.rmdir(path)  # never recursive: a leftover mount makes this fail
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def clean_subpaths(pod_dir: str, volume: str) -> None:
    """Unmount and remove every subPath target of one volume of the pod."""
    vdir = os.path.join(pod_dir, SUBPATH_DIR, volume)
    try:
        containers = os.listdir(vdir)
    except FileNotFoundError:
        return
    table = mountutil.mount_table()
    for c in containers:
        cdir = os.path.join(vdir, c)
        for idx in os.listdir(cdir):
            path = os.path.join(cdir, idx)
            if os.path.realpath(path) in table:
                try:
                    mountutil.umount(path)
                except OSError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: no longer mounted
                        raise
            _remove(path)
        os.rmdir(cdir)
    os.rmdir(vdir)
    try:
        os.rmdir(os.path.join(pod_dir, SUBPATH_DIR))
    except OSError:
        pass


def subpath_volumes(pod_dir: str) -> list[str]:
    """Names of the volumes that have subPath targets in the pod dir."""
    try:
        return sorted(os.listdir(os.path.join(pod_dir, SUBPATH_DIR)))
    except (FileNotFoundError, NotADirectoryError):
        return []
