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

log = logging.getLogger(__name__)

ALWAYS = "Always"
ON_ROOT_MISMATCH = "OnRootMismatch"

RW_MASK = 0o660
RO_MASK = 0o440
DIR_MASK = 0o110 | stat.S_ISGID


def _wanted_bits(is_dir: bool, read_only: bool) -> int:
    bits = RO_MASK if read_only else RW_MASK
    return bits | DIR_MASK if is_dir else bits


def set_one(path: str, gid: int, read_only: bool) -> None:
    """One file or directory: its group and group permission bits."""
    try:
        st = os.lstat(path)
    except OSError as err:
        log.error("fsGroup: lstat %s failed: %s", path, err)
        return
    if st.st_gid != gid:
        try:
            os.lchown(path, -1, gid)
        except OSError as err:
            log.error("fsGroup: lchown %s failed: %s", path, err)
    if stat.S_ISLNK(st.st_mode):
        return
    mode = stat.S_IMODE(st.st_mode)
    want = mode | _wanted_bits(stat.S_ISDIR(st.st_mode), read_only)
    if want != mode:
        try:
            os.chmod(path, want)
        except OSError as err:
            log.error("fsGroup: chmod %s failed: %s", path, err)


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
    (no fsGroup, or OnRootMismatch with a matching root)."""
    if gid is None:
        return False
    if change_policy == ON_ROOT_MISMATCH and root_matches(root, gid, read_only):
        log.debug("fsGroup: %s already owned by group %d, not walking it", root, gid)
        return False
    set_one(root, gid, read_only)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            set_one(os.path.join(dirpath, name), gid, read_only)
    return True


def set_fd(fd: int, gid: int, read_only: bool) -> None:
    """set_one for a file or directory the caller holds open (never a link)."""
    st = os.fstat(fd)
    if st.st_gid != gid:
        os.fchown(fd, -1, gid)
    mode = stat.S_IMODE(st.st_mode)
    want = mode | _wanted_bits(stat.S_ISDIR(st.st_mode), read_only)
    if want != mode:
        os.fchmod(fd, want)
