"""Mount syscalls, mount-table reads and removal that never crosses a mount
(mount-utils upstream): below both the volume plugins and the volume manager.
Everything here blocks: callers run it in an executor."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator

from kubelet.util import filesystem

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


def _entry(line: str) -> tuple[str, str] | None:
    """(mount point, filesystem type) of one mountinfo line; None if malformed."""
    left, _, right = line.partition(" - ")
    fields, tail = left.split(), right.split()
    if len(fields) < 5 or not tail:
        return None
    return _unescape(fields[4]), tail[0]


def mount_table(path: str = MOUNTINFO) -> dict[str, str]:
    """Mount point -> filesystem type, the last mount over a point winning."""
    table: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                if (entry := _entry(line)) is not None:
                    table[entry[0]] = entry[1]
    except OSError:
        pass
    return table


def is_mount_point(path: str) -> bool:
    """Whether something is mounted at `path` itself (after its links). Costs
    two opens, where a mount-table read costs a line per mount on the node (two
    per pod with a secret and a token volume). False when `path` does not exist
    (or a file stands where a dir should)."""
    real = os.path.realpath(path)
    parent = os.path.dirname(real)
    if parent == real:
        return True  # "/"
    return mounted_at(parent, os.path.basename(real))


def mounted_at(parent: str, name: str) -> bool:
    """Whether a mount sits at entry `name` of directory `parent` (which is taken
    as given): it is on another mount than `parent`, by mount id, so a bind
    mount of the same filesystem counts. A link named `name` is never followed
    (it lives on its parent's mount, so it is no mount point)."""
    try:
        pfd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    except (FileNotFoundError, NotADirectoryError):
        os.close(pfd)
        return False
    try:
        return not filesystem.same_mount(fd, pfd)
    finally:
        os.close(fd)
        os.close(pfd)


def _escape(path: bytes) -> bytes:
    # the kernel's escaping of a mountinfo path (see _unescape)
    for ch in (b"\\", b" ", b"\t", b"\n"):
        path = path.replace(ch, b"\\%03o" % ord(ch))
    return path


def _entries_naming(mountinfo: str, needle: bytes) -> Iterator[tuple[str, str]]:
    """The entries of the mountinfo lines that hold `needle`: the table is
    searched for it instead of parsed whole."""
    try:
        with open(mountinfo, "rb") as f:
            data = f.read()
    except OSError:
        return
    at = data.find(needle)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        entry = _entry(data[start:end].decode("utf-8", "surrogateescape"))
        if entry is not None:
            yield entry
        at = data.find(needle, end)


def fstype_at(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """The type of the last mount at `path` (after its links), or None."""
    real = os.path.realpath(path)
    found = None
    for point, fstype in _entries_naming(mountinfo, b" " + _escape(os.fsencode(real)) + b" "):
        if point == real:
            found = fstype
    return found


def mount_points_under(dir: str, mountinfo: str = MOUNTINFO) -> list[str]:
    """The mount points strictly below `dir` (taken as given, not resolved)."""
    prefix = dir.rstrip("/") + "/"
    found = _entries_naming(mountinfo, b" " + _escape(os.fsencode(prefix)))
    return sorted({p for p, _ in found if p.startswith(prefix)})


def mount_fstype(path: str, table: dict[str, str] | None = None) -> str | None:
    """The filesystem type mounted exactly at `path`, or None if it is no mount point."""
    if table is None:
        return fstype_at(path) if is_mount_point(path) else None
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


MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 0x100000


def is_shared_mount(path: str, mountinfo: str = MOUNTINFO) -> bool | None:
    """Whether the mount exactly at `path` is shared (None: no mount there)."""
    shared: bool | None = None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                left, _, _ = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 6 and _unescape(fields[4]) == path:
                    shared = any(o.startswith("shared:") for o in fields[6:])
    except OSError:
        return None
    return shared


def make_rshared(path: str, mountinfo: str = MOUNTINFO) -> None:
    """MakeRShared upstream: bind-mount `path` onto itself if it is no mount
    point, then make it (and everything below) shared. OSError on failure."""
    path = os.path.realpath(path)
    state = is_shared_mount(path, mountinfo)
    if state:
        return
    if state is None:
        mount(path, path, "", "", MS_BIND)
    mount("none", path, "", "", MS_SHARED | MS_REC)
