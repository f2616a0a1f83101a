"""hostPath volumes (pkg/volume/hostpath upstream): a path on the node, checked
against the volume's `type` (created for the *OrCreate types) and bind-mounted
as it is. Nothing is written under the pod's volumes dir, so there is nothing
to tear down. The PVC plugin reuses `check_type` for hostPath PVs.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping

from kubelet.types import Pod
from kubelet.util import mountutil
from kubelet.volume import MountedVolume, VolumeError, VolumeSpec

PLUGIN_NAME = "kubernetes.io/host-path"

DIRECTORY_OR_CREATE = "DirectoryOrCreate"
DIRECTORY = "Directory"
FILE_OR_CREATE = "FileOrCreate"
FILE = "File"
SOCKET = "Socket"
CHAR_DEVICE = "CharDevice"
BLOCK_DEVICE = "BlockDevice"

_DESCRIPTION = {
    DIRECTORY: "directory",
    FILE: "file",
    SOCKET: "socket file",
    CHAR_DEVICE: "character device",
    BLOCK_DEVICE: "block device",
}


def validate_no_backsteps(path: str) -> None:
    if ".." in path.split("/"):
        raise VolumeError(f"invalid HostPath `{path}`: must not contain '..'")


def _file_type(path: str) -> str:
    # GetFileType upstream: follows symlinks, knows five kinds.
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return DIRECTORY
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISSOCK(mode):
        return SOCKET
    if stat.S_ISCHR(mode):
        return CHAR_DEVICE
    if stat.S_ISBLK(mode):
        return BLOCK_DEVICE
    raise OSError("only recognise file, directory, socket, block device and character device")


def _matches(path: str, expected: str) -> None:
    if not os.path.exists(path):
        raise VolumeError(f"hostPath {path} doesn't exist")
    description = _DESCRIPTION[expected]
    try:
        actual = _file_type(path)
    except OSError as err:
        raise VolumeError(
            f"hostPath type check failed, {path} is not a {description}, "
            f"unable to determine its type: {err}"
        ) from err
    if actual != expected:
        raise VolumeError(
            f"hostPath type check failed: {path} is not a {description}, it's a {actual}"
        )


def check_type(path: str, path_type: str) -> None:
    """checkType upstream, blocking. Raises VolumeError with upstream's texts."""
    if path_type == "":
        return
    if path_type == DIRECTORY_OR_CREATE:
        if not os.path.exists(path):
            try:
                # MkdirAll(0755): the umask applies, as it does upstream.
                os.makedirs(path, 0o755, exist_ok=True)
            except OSError as err:
                raise VolumeError(mountutil.go_path_error("mkdir", err)) from err
            return
        path_type = DIRECTORY
    elif path_type == FILE_OR_CREATE:
        if not os.path.exists(path):
            try:
                os.close(os.open(path, os.O_CREAT | os.O_RDONLY, 0o644))
            except FileExistsError:
                pass
            except OSError as err:
                raise VolumeError(mountutil.go_path_error("open", err)) from err
            return
        path_type = FILE
    if path_type not in _DESCRIPTION:
        raise VolumeError(f"{path_type} is an invalid volume type")
    _matches(path, path_type)


class HostPathPlugin:
    name = PLUGIN_NAME
    requires_remount = False
    read_only = False
    selinux_relabel = False

    def can_support(self, spec: VolumeSpec) -> bool:
        return "hostPath" in spec

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        await self.set_up_volume(pod, spec, dir)

    async def set_up_volume(self, pod: Pod, spec: VolumeSpec, dir: str) -> MountedVolume:
        src: Mapping[str, object] = spec.get("hostPath") or {}
        path = str(src.get("path") or "")
        validate_no_backsteps(path)
        path_type = str(src.get("type") or "")
        if path_type:
            await asyncio.get_running_loop().run_in_executor(None, check_type, path, path_type)
        return MountedVolume(name=spec["name"], host_path=path)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        return None
