"""Mount syscalls and mount-table reads for the volume code (mount-utils
upstream). Everything here blocks: callers run it in an executor."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

from kubelet.util import filesystem
from kubelet.volume import VolumeError

MOUNTINFO = "/proc/self/mountinfo"

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def mount(source: str, target: str, fstype: str, options: str = "", flags: int = 0) -> None:
    """mount(2); raises OSError with the errno (EPERM without CAP_SYS_ADMIN)."""
    rc = _lib().mount(
        os.fsencode(source), os.fsencode(target), os.fsencode(fstype), flags,
        os.fsencode(options) if options else None,
    )  # fmt: skip
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def umount(target: str) -> None:
    rc = _lib().umount2(os.fsencode(target), 0)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_table(path: str = MOUNTINFO) -> dict[str, str]:
    """Mount point -> filesystem type, the last mount over a point winning."""
    table: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                table[_unescape(fields[4])] = right.split()[0]
    except OSError:
        pass
    return table


def mount_fstype(path: str, table: dict[str, str] | None = None) -> str | None:
    """The filesystem type mounted exactly at `path`, or None if it is no mount point."""
    if table is None:
        table = mount_table()
    return table.get(os.path.realpath(path))


def lowercase_strerror(err: OSError) -> str:
    """Go's syscall error text ("permission denied") for an OSError."""
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def go_path_error(op: str, err: OSError) -> str:
    """An OSError as Go's *PathError prints it: "mkdir /x: permission denied"."""
    return f"{op} {err.filename}: {lowercase_strerror(err)}"


def remove_all_one_filesystem(path: str) -> None:
    """rm -rf that never crosses into another mount (RemoveAllOneFilesystem
    upstream, with the mount id instead of st_dev, so that a bind mount of the
    same filesystem counts too): a mount left under a volume or pod dir (a
    Bidirectional mount from a container, a leaked tmpfs, a subPath bind) must
    stop the removal instead of emptying whatever is mounted there. Relative
    to directory descriptors: symlinks are removed, never followed."""
    # The parent is the kubelet's own path (its root dir may be a link).
    parent = os.open(os.path.dirname(path.rstrip("/")) or "/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        filesystem.remove_all_at(parent, os.path.basename(path.rstrip("/")))
    finally:
        os.close(parent)


def remove_empty_parents(path: str, stop: str) -> None:
    """rmdir path's parents up to (not including) stop while they are empty."""
    cur = os.path.dirname(path.rstrip("/"))
    stop = stop.rstrip("/")
    while cur.startswith(stop + "/"):
        try:
            os.rmdir(cur)
        except OSError:
            return
        cur = os.path.dirname(cur)


def unmount_and_remove(dir: str, op: str, mountinfo: str = MOUNTINFO) -> None:
    """Unmount `dir` if something is mounted there, then remove it without ever
    crossing into another filesystem. VolumeError with upstream's texts; `op` is
    the syscall the removal error names (unlinkat, remove)."""
    if not os.path.lexists(dir):
        return
    if mount_fstype(dir, mount_table(mountinfo)) is not None:
        try:
            umount(dir)
        except OSError as err:
            raise VolumeError(
                f"unmount failed: {lowercase_strerror(err)}\nUnmounting arguments: {dir}"
            ) from err
    try:
        remove_all_one_filesystem(dir)
    except OSError as err:
        raise VolumeError(go_path_error(op, err)) from err


def ensure_tmpfs(dir: str, size: int, what: str, mountinfo: str = MOUNTINFO) -> None:
    """Mount a tmpfs at `dir` unless one is there already (set_up is idempotent).
    VolumeError naming `what` when this kubelet may not mount here."""
    if mount_fstype(dir, mount_table(mountinfo)) == "tmpfs":
        return
    options = f"size={size}" if size > 0 else ""
    try:
        mount("tmpfs", dir, "tmpfs", options)
    except OSError as err:
        if err.errno in (errno.EPERM, errno.EACCES):
            raise VolumeError(
                f"{what} needs a tmpfs mount at {dir}, which this kubelet is not permitted "
                f"to make here ({lowercase_strerror(err)}: it needs CAP_SYS_ADMIN in the "
                "host mount namespace)"
            ) from err
        raise VolumeError(
            f"mount failed: {lowercase_strerror(err)}\n"
            f"Mounting command: mount\nMounting arguments: -t tmpfs -o {options} tmpfs {dir}"
        ) from err
