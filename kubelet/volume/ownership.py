"""fsGroup ownership of a volume's files (SetVolumeOwnership, volume_linux.go).

Every file and directory under the volume gets the pod's fsGroup as its group
and group read (and write, unless the volume is read-only) permission;
directories also get group execute and setgid, so that files made later
inherit the group. Symlinks get the group but no chmod: a chmod would follow
them and change their target.

`fsGroupChangePolicy: OnRootMismatch` skips the walk when the volume's root
already has the group and the permissions the walk would give it, which is
what makes a pod with a large volume start in seconds instead of minutes;
`Always` (the default) walks every time the volume is set up. As upstream, a
file that cannot be changed is logged and the walk goes on.

Blocking: callers run these in an executor.
"""

from __future__ import annotations

import logging
import os
import stat

from kubelet.util import filesystem

log = logging.getLogger(__name__)

ALWAYS = "Always"
ON_ROOT_MISMATCH = "OnRootMismatch"

RW_MASK = 0o660
RO_MASK = 0o440
DIR_MASK = 0o110 | stat.S_ISGID


def _wanted_bits(is_dir: bool, read_only: bool) -> int:
    bits = RO_MASK if read_only else RW_MASK
    return bits | DIR_MASK if is_dir else bits


def _set_at(dir_fd: int, name: str, gid: int, read_only: bool) -> None:
    """One entry of a directory the walk holds open. Opened O_PATH without
    following it, so a name swapped for a link between two steps changes the
    link (its group), never what it points at; chmod goes through the
    descriptor's /proc path, which names the very inode opened."""
    try:
        fd = os.open(name, filesystem.O_PATH, dir_fd=dir_fd)
    except OSError as err:
        log.error("fsGroup: open %s failed: %s", name, err)
        return
    try:
        st = os.fstat(fd)
        if st.st_gid != gid:
            # By name without following: a link swapped in gets the group itself.
            os.chown(name, -1, gid, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return
        mode = stat.S_IMODE(st.st_mode)
        want = mode | _wanted_bits(stat.S_ISDIR(st.st_mode), read_only)
        if want != mode:
            os.chmod(f"/proc/self/fd/{fd}", want)
    except OSError as err:
        log.error("fsGroup: changing %s failed: %s", name, err)
    finally:
        os.close(fd)


def root_matches(root: str, gid: int, read_only: bool) -> bool:
    """What OnRootMismatch checks: the root has the group and the bits already."""
    try:
        st = os.stat(root)
    except OSError:
        return False
    want = _wanted_bits(stat.S_ISDIR(st.st_mode), read_only)
    return st.st_gid == gid and stat.S_IMODE(st.st_mode) & want == want


def set_volume_ownership(
    root: str, gid: int | None, change_policy: str | None = None, read_only: bool = False
) -> bool:
    """Apply fsGroup to the whole volume. Returns False when nothing was walked
    (no fsGroup, or OnRootMismatch with a matching root). The walk holds each
    directory open and never follows a link below the root."""
    if gid is None:
        return False
    if change_policy == ON_ROOT_MISMATCH and root_matches(root, gid, read_only):
        log.debug("fsGroup: %s already owned by group %d, not walking it", root, gid)
        return False
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        set_fd(top, gid, read_only)
        for dir_fd, name, _ in filesystem.walk(top):
            _set_at(dir_fd, name, gid, read_only)
    finally:
        os.close(top)
    return True


def set_fd(fd: int, gid: int, read_only: bool) -> None:
    """fsGroup's group and bits for a file or directory the caller holds open."""
    st = os.fstat(fd)
    if st.st_gid != gid:
        os.fchown(fd, -1, gid)
    mode = stat.S_IMODE(st.st_mode)
    want = mode | _wanted_bits(stat.S_ISDIR(st.st_mode), read_only)
    if want != mode:
        os.fchmod(fd, want)
