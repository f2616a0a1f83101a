"""Raw block `local` PVs (the local volume plugin's block mapper upstream):
the PV's path names a block device on the node, which the containers get
through their volumeDevices as a CRI device.

The path is the PV's, and local PVs commonly name a device through links
(udev's /dev/disk/by-id, the static provisioner's discovery dirs), which
upstream follows. Here the kubelet reads and resolves each link itself and
refuses a path that passes through its root dir, where pods' volumes are and
a pod may have planted a link or a device node. What the path resolves to
must be a block device: checked on a descriptor opened without following a
link, whose path the kernel then reports as the one resolved (so nothing was
swapped in meanwhile). The runtime is given that device's own path, never a
link. Nothing is made on disk for the pod.
"""

from __future__ import annotations

import errno
import os
import stat

from kubelet.util import mountutil
from kubelet.volume import VolumeError

# As many links as the kernel follows in one lookup.
MAX_LINKS = 40


def _inside(path: str, root: str) -> bool:
    return bool(root) and (path == root or path.startswith(root.rstrip("/") + "/"))


def resolve(path: str, refuse_below: str = "") -> str:
    """`path` with every link replaced by what it says, each read with
    readlink (never walked by the kernel); no step may be at or below
    `refuse_below`. Raises OSError (ELOOP, ENOENT, ...) or VolumeError."""
    todo = [c for c in reversed(path.split("/")) if c]
    done, links = "/", 0
    while todo:
        comp = todo.pop()
        if comp == ".":
            continue
        if comp == "..":  # only from a link's target: the PV's path has none
            done = os.path.dirname(done)
            continue
        step = os.path.join(done, comp)
        if _inside(step, refuse_below):
            raise VolumeError(f"{path} passes through the kubelet's root dir {refuse_below}")
        if not stat.S_ISLNK(os.lstat(step).st_mode):
            done = step
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        target = os.readlink(step)
        if target.startswith("/"):
            done = "/"
        todo.extend(c for c in reversed(target.split("/")) if c)
    return done


def block_device(pv_name: str, path: str, root_dir: str) -> str:
    """The block device node a Block local PV's path names (blocking)."""
    if not path.startswith("/"):
        raise VolumeError(f'LocalVolume volume "{pv_name}" path {path} is not absolute')
    if ".." in path.split("/"):
        raise VolumeError(f"invalid path: {path} must not contain '..'")
    root = os.path.realpath(root_dir) if root_dir else ""
    try:
        device = resolve(path, root)
    except OSError as err:
        raise VolumeError(
            mountutil.go_path_error("lstat", err), "MapVolume.EvalHostSymlinks"
        ) from err
    except VolumeError as err:
        raise VolumeError(str(err), "MapVolume.EvalHostSymlinks") from err
    try:
        fd = os.open(device, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise VolumeError(mountutil.go_path_error("open", err), "MapVolume.MapPodDevice") from err
    try:
        is_block = stat.S_ISBLK(os.fstat(fd).st_mode)
        same = os.readlink(f"/proc/self/fd/{fd}") == device
    finally:
        os.close(fd)
    if not is_block:
        raise VolumeError(
            f'local volume "{pv_name}": {path} is not a block device', "MapVolume.MapPodDevice"
        )
    if not same:
        raise VolumeError(f"{path} changed while it was resolved", "MapVolume.MapPodDevice")
    return device
