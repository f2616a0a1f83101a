"""A container's volumeMounts as CRI bind mounts (makeMounts in kubelet_pods.go
upstream), without /etc/hosts and the termination log, which are added elsewhere.

subPath and subPathExpr get upstream's checks: no absolute path, no `..`, and
no symlink that leads out of the volume. The subPath is resolved inside the
volume's real path and then opened component by component without following
symlinks, so a link swapped in between the two steps is caught; a missing
subPath directory is created the same way, with the volume's mode. Given the
pod dir, the opened descriptor is then bind-mounted under
`<pod dir>/volume-subpaths/` as upstream does (see volumemanager/subpath.py),
so the runtime cannot be raced either; without it, or where this kubelet may
not mount, the resolved path goes to the runtime.

Blocking file I/O happens only for mounts with a subPath: callers on the event
loop run make_mounts in an executor when `has_subpath(container)`.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any

from kubelet.container.runtime import ContainerConfigError, Mount
from kubelet.volumemanager import MountedVolume
from kubelet.volumemanager.subpath import bind_subpath

log = logging.getLogger(__name__)

Pod = dict[str, Any]

_PROPAGATION = {
    None: "",
    "": "",
    "None": "",
    "HostToContainer": "HostToContainer",
    "Bidirectional": "Bidirectional",
}


def has_subpath(container: dict[str, Any]) -> bool:
    return any(
        m.get("subPath") or m.get("subPathExpr") for m in container.get("volumeMounts") or []
    )


def make_mounts(
    pod: Pod,
    container: dict[str, Any],
    volumes: Mapping[str, MountedVolume],
    expand: Callable[[str], str],
    pod_dir: str | None = None,
) -> list[Mount]:
    """Raises ContainerConfigError with upstream's messages. With `pod_dir`
    (`<root>/pods/<uid>`), subPaths are bind-mounted under it."""
    cname = container.get("name", "")
    privileged = bool((container.get("securityContext") or {}).get("privileged"))
    out: list[Mount] = []
    for index, vm in enumerate(container.get("volumeMounts") or []):
        name = vm.get("name", "")
        vol = volumes.get(name)
        if vol is None:
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
            )
        )
    return out


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def _prepare_subpath(
    volume_path: str, sub: str, name: str, cname: str, pod_dir: str | None, index: int
) -> str:
    full = os.path.join(volume_path, sub)
    if not os.path.exists(full):
        try:
            _safe_make_dir(sub, volume_path)
        except OSError as err:
            if err.errno != errno.EEXIST:
                # Upstream keeps host details out of the message.
                raise ContainerConfigError(
                    f'failed to create subPath directory for volumeMount "{name}" '
                    f'of container "{cname}"'
                ) from err
    try:
        base = os.path.realpath(volume_path, strict=True)
        resolved = os.path.realpath(full, strict=True)
        if not _within(resolved, base):
            raise OSError(errno.EXDEV, f"subpath {resolved!r} not within volume path {base!r}")
        fd = _safe_open(resolved, base)
        try:
            if pod_dir is not None:
                return bind_subpath(fd, pod_dir, name, cname, index)
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.EACCES):
                raise
            log.warning("subPath %s: bind mount not permitted here, using its path: %s", full, err)
        finally:
            os.close(fd)
    except OSError as err:
        raise ContainerConfigError(
            f'failed to prepare subPath for volumeMount "{name}" of container "{cname}"'
        ) from err
    return resolved


def _components(rel: str) -> list[str]:
    return [c for c in rel.split("/") if c not in ("", ".")]


def _safe_open(path: str, base: str) -> int:
    """Open `path` (already resolved, inside `base`) one component at a time
    without following symlinks (doSafeOpen upstream). Returns an O_PATH fd."""
    fd = os.open(base, os.O_PATH | os.O_DIRECTORY)
    try:
        for comp in _components(os.path.relpath(path, base)):
            nfd = os.open(comp, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.ELOOP, "symlink is not allowed in a resolved subPath", comp)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _safe_make_dir(sub: str, volume_path: str) -> None:
    """mkdir -p of sub inside the volume (SafeMakeDir upstream): the part that
    exists may hold symlinks that stay inside the volume; the rest is created
    through descriptors opened without following symlinks, with the volume
    dir's mode."""
    base = os.path.realpath(volume_path, strict=True)
    perm = os.stat(base).st_mode & 0o7777
    comps = _components(sub)
    existing, i = base, 0
    while i < len(comps) and os.path.lexists(os.path.join(existing, comps[i])):
        existing = os.path.join(existing, comps[i])
        i += 1
    real = os.path.realpath(existing)
    if not _within(real, base):
        raise OSError(errno.EXDEV, f"path {real} is outside of allowed base {base}")
    fd = _safe_open(real, base)
    try:
        for comp in comps[i:]:
            os.mkdir(comp, perm, dir_fd=fd)
            nfd = os.open(comp, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            os.fchmod(fd, perm)  # the umask took bits off
    finally:
        os.close(fd)
