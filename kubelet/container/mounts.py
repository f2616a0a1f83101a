"""A container's volumeMounts as CRI bind mounts (makeMounts in kubelet_pods.go
upstream), without /etc/hosts and the termination log, which are added elsewhere.

subPath and subPathExpr get upstream's checks: no absolute path, no `..`, and
no symlink that leads out of the volume. The subPath is resolved one
component at a time below a descriptor of the volume, reading links instead
of letting the kernel follow them (filesystem.open_beneath), so no link,
planted before or swapped in during the lookup, leads outside; a missing
subPath directory is created the same way, with the volume's mode. The
opened descriptor is then bind-mounted under `<pod dir>/volume-subpaths/` as
upstream does (see volumemanager/subpath.py), and that target is what the
runtime gets, so the runtime cannot be raced either. Where the bind mount
cannot be made (no CAP_SYS_ADMIN) the container fails with
CreateContainerConfigError: a plain path would be open to the race.

Blocking file I/O happens only for mounts with a subPath: callers on the event
loop run make_mounts in an executor when `has_subpath(container)`.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping

from kubelet.container.runtime import ContainerConfigError, Device, Mount
from kubelet.types import Container, Pod
from kubelet.util import filesystem
from kubelet.volume import MountedVolume
from kubelet.volumemanager.subpath import bind_subpath

log = logging.getLogger(__name__)


_PROPAGATION = {
    None: "",
    "": "",
    "None": "",
    "HostToContainer": "HostToContainer",
    "Bidirectional": "Bidirectional",
}


def has_subpath(container: Container) -> bool:
    return any(
        m.get("subPath") or m.get("subPathExpr") for m in container.get("volumeMounts") or []
    )


def resolve_recursive_read_only(vm: Mapping[str, object], supported: bool) -> bool:
    """resolveRecursiveReadOnly: whether the mount is made recursively read-only
    (every submount too). supported: the pod's runtime handler can. Raises
    ValueError with upstream's words for a mode that cannot be honoured."""
    mode = vm.get("recursiveReadOnly")
    if mode in (None, "", "Disabled"):
        return False
    name = vm.get("name", "")
    if not vm.get("readOnly"):
        raise ValueError(
            f'volume "{name}" requested recursive read-only mode, but it is not read-only'
        )
    propagation = vm.get("mountPropagation")
    if propagation not in (None, "", "None"):
        raise ValueError(
            f'volume "{name}" requested recursive read-only mode, but it is not compatible '
            f'with propagation "{propagation}"'
        )
    if mode == "IfPossible":
        return supported
    if mode == "Enabled":
        if not supported:
            raise ValueError(
                f'volume "{name}" requested recursive read-only mode, but it is not supported '
                "by the runtime"
            )
        return True
    raise ValueError(f'unknown recursive read-only mode "{mode}"')


def make_mounts(
    pod: Pod,
    container: Container,
    volumes: Mapping[str, MountedVolume],
    expand: Callable[[str], str],
    pod_dir: str,
    supports_rro: bool = False,
) -> list[Mount]:
    """Raises ContainerConfigError with upstream's messages. subPaths are
    bind-mounted under `pod_dir` (`<root>/pods/<uid>`). supports_rro: the
    pod's runtime handler makes recursive read-only mounts."""
    cname = container.get("name", "")
    privileged = bool((container.get("securityContext") or {}).get("privileged"))
    out: list[Mount] = []
    for index, vm in enumerate(container.get("volumeMounts") or []):
        name = vm.get("name", "")
        vol = volumes.get(name)
        if vol is None or vol.block:
            # A block volume in volumeMounts is refused when it is set up; never
            # bind-mount a raw device as if it were a directory.
            raise ContainerConfigError(
                f'cannot find volume "{name}" to mount into container "{cname}"'
            )
        sub = str(vm.get("subPath") or "")
        if vm.get("subPathExpr"):
            sub = expand(str(vm["subPathExpr"]))
        host_path = vol.host_path
        if sub:
            if sub.startswith("/"):
                raise ContainerConfigError(f"error SubPath `{sub}` must not be an absolute path")
            if ".." in sub.split("/"):
                raise ContainerConfigError(
                    f"unable to provision SubPath `{sub}`: must not contain '..'"
                )
            host_path = _prepare_subpath(vol.host_path, sub, name, cname, pod_dir, index)
        mode = vm.get("mountPropagation")
        if mode not in _PROPAGATION:
            raise ContainerConfigError(f'invalid MountPropagation mode: "{mode}"')
        propagation = _PROPAGATION[mode]
        if propagation == "Bidirectional" and not privileged:
            # API validation refuses this; static pods skip it, so check here too.
            raise ContainerConfigError(
                f'volumeMount "{name}" of container "{cname}": Bidirectional mount '
                "propagation is available only to privileged containers"
            )
        try:
            rro = resolve_recursive_read_only(vm, supports_rro)
        except ValueError as err:
            raise ContainerConfigError(
                f"failed to resolve recursive read-only mode: {err}"
            ) from err
        container_path = str(vm.get("mountPath") or "")
        if not container_path.startswith("/"):
            container_path = os.path.normpath("/" + container_path)
        out.append(
            Mount(
                container_path=container_path,
                host_path=host_path,
                read_only=bool(vm.get("readOnly")) or vol.read_only,
                selinux_relabel=vol.selinux_relabel,
                propagation=propagation,
                recursive_read_only=rro,
            )
        )
    return out


def make_block_devices(container: Container, volumes: Mapping[str, MountedVolume]) -> list[Device]:
    """A container's volumeDevices as CRI devices (makeBlockVolumes upstream).
    The device path is the pod's: absolute and without '..', as upstream's
    validation and kubelet ask. The host side is the volume's publish file,
    which must itself be a block device (never followed if it is a link).
    Blocking (an lstat per device)."""
    cname = container.get("name", "")
    out: list[Device] = []
    for vd in container.get("volumeDevices") or []:
        name, path = str(vd.get("name") or ""), str(vd.get("devicePath") or "")
        if not path.startswith("/"):
            raise ContainerConfigError(f"error DevicePath `{path}` must be an absolute path")
        if ".." in path.split("/"):
            raise ContainerConfigError(f"error DevicePath `{path}` must not contain '..'")
        vol = volumes.get(name)
        if vol is None or not vol.block:
            raise ContainerConfigError(
                f'cannot find volume "{name}" to pass into container "{cname}"'
            )
        try:
            is_blk = stat.S_ISBLK(os.lstat(vol.host_path).st_mode)
        except OSError:
            is_blk = False
        if not is_blk:
            raise ContainerConfigError(
                f'volume "{name}" of container "{cname}" is not mapped to a block device'
            )
        # readOnly of the claim: read access only (no mknod, no write).
        out.append(Device(path, vol.host_path, "r" if vol.read_only else "mrw"))
    return out


def _prepare_subpath(
    volume_path: str, sub: str, name: str, cname: str, pod_dir: str, index: int
) -> str:
    """Resolve `sub` below the volume without ever leaving it, create it if
    missing, and bind-mount what was opened at the container's own target
    under the pod dir. Any failure is the container's: never a fallback to a
    path the runtime would look up again."""
    try:
        root = os.open(volume_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise ContainerConfigError(
            f'failed to prepare subPath for volumeMount "{name}" of container "{cname}"'
        ) from err
    try:
        try:
            # Existence is judged by the safe lookup too: stat(2) on the joined
            # path would tell the pod whether a host path behind its link exists.
            fd = _open_or_make(root, sub, name, cname)
            try:
                return bind_subpath(fd, pod_dir, name, cname, index)
            finally:
                os.close(fd)
        except OSError as err:
            # Upstream keeps host details out of the message; the log has them.
            log.warning("subPath %r of volume %r for container %r: %s", sub, name, cname, err)
            raise ContainerConfigError(
                f'failed to prepare subPath for volumeMount "{name}" of container "{cname}"'
            ) from err
    finally:
        os.close(root)


def _open_or_make(root: int, sub: str, name: str, cname: str) -> int:
    try:
        return filesystem.open_beneath(root, sub)
    except FileNotFoundError:
        _safe_make_dir(root, sub, name, cname)
    return filesystem.open_beneath(root, sub)


def _safe_make_dir(root: int, sub: str, name: str, cname: str) -> None:
    """mkdir -p of sub inside the volume with the volume root's mode
    (SafeMakeDir upstream): links on the way are followed only while they
    stay inside the volume."""
    try:
        perm = stat.S_IMODE(os.fstat(root).st_mode)
        os.close(filesystem.open_beneath(root, sub, create_mode=perm))
    except OSError as err:
        log.warning("subPath %r of volume %r for container %r: %s", sub, name, cname, err)
        raise ContainerConfigError(
            f'failed to create subPath directory for volumeMount "{name}" of container "{cname}"'
        ) from err
