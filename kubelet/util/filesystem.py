"""Filesystem operations on trees that someone else controls (pkg/util/filesystem,
the safe open of volume/util/subpath and RemoveAllOneFilesystem upstream).

A volume's content belongs to its pod: any name in it may become a symlink to
`/etc`, a FIFO, or a mount point at any moment. So everything here works
relative to directory descriptors, one path component at a time, never
following a symlink the kernel would resolve for us (O_NOFOLLOW, dir_fd=,
follow_symlinks=False) and never entering another mount. The kubelet's own
paths (the root dir, pods/<uid>/volumes/...) are opened by path; what lies
below them is opened only through these functions.

Everything here blocks: callers run it in an executor.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# Linux's own limit on symlinks followed in one lookup.
MAX_LINKS = 40
# Deeper than this, remove_all moves a subtree up instead of holding more
# descriptors: a planted tree thousands of levels deep costs no more fds.
MAX_HELD = 64


def is_component(name: str) -> bool:
    """One plain path component: not empty, `.`, `..`, and no '/' or NUL."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def component(name: str, what: str) -> str:
    """`name`, when it is one plain path component; ValueError naming `what`
    otherwise. The guard wherever a host path is built from a pod's names
    (its uid, volume and container names): the sources validate them first,
    this makes sure nothing slipped past."""
    if not is_component(name):
        raise ValueError(f"{what} {name!r} cannot be used in a path")
    return name


def components(rel: str) -> list[str]:
    return [c for c in rel.split("/") if c not in ("", ".")]


def open_dir(path: str) -> int:
    """A directory the kubelet named itself; its last component must not be a symlink."""
    return os.open(path, O_DIR)


def open_dir_at(dir_fd: int, name: str) -> int:
    return os.open(name, O_DIR, dir_fd=dir_fd)


def mount_id(fd: int) -> int:
    """The mount an open file is on (fdinfo's mnt_id): unlike st_dev, it tells
    a bind mount of the same filesystem apart."""
    with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
        for line in f:
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    raise OSError(errno.EINVAL, "no mnt_id in fdinfo", fd)


def same_mount(a: int, b: int) -> bool:
    return os.fstat(a).st_dev == os.fstat(b).st_dev and mount_id(a) == mount_id(b)


def _step(fds: list[int], root_fd: int, comp: str, create_mode: int | None) -> int:
    """O_PATH fd of `comp` in the current directory, created as a directory if
    missing and create_mode is given."""
    cur = fds[-1] if fds else root_fd
    try:
        return os.open(comp, O_PATH, dir_fd=cur)
    except FileNotFoundError:
        if create_mode is None:
            raise
    try:
        os.mkdir(comp, create_mode, dir_fd=cur)
    except FileExistsError:
        pass  # made meanwhile: whatever it is, the next open judges it
    else:
        fd = os.open(comp, O_DIR, dir_fd=cur)
        try:
            os.fchmod(fd, create_mode)  # the umask took bits off
        finally:
            os.close(fd)
    return os.open(comp, O_PATH, dir_fd=cur)


def open_beneath(root_fd: int, rel: str, create_mode: int | None = None) -> int:
    """An O_PATH descriptor of `rel` below the directory `root_fd`, resolved one
    component at a time. A symlink is followed only by reading it and walking
    its relative target from where it is, so no lookup ever leaves the root:
    an absolute target, or a `..` above the root, is EXDEV; more than
    MAX_LINKS links is ELOOP. With create_mode, missing components are made
    as directories with that mode (SafeMakeDir upstream)."""
    todo = components(rel)
    todo.reverse()
    fds: list[int] = []
    links = 0
    try:
        while todo:
            comp = todo.pop()
            if comp == "..":
                if not fds:
                    raise OSError(errno.EXDEV, "path leads outside the volume", rel)
                os.close(fds.pop())
                continue
            fd = _step(fds, root_fd, comp, create_mode)
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink("", dir_fd=fd)
                os.close(fd)
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", rel)
                if target.startswith("/"):
                    raise OSError(errno.EXDEV, "symlink leads outside the volume", rel)
                todo.extend(reversed(components(target)))
                continue
            if todo and not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise OSError(errno.ENOTDIR, "not a directory", rel)
            fds.append(fd)
        return fds.pop() if fds else os.open(".", O_PATH, dir_fd=root_fd)
    finally:
        for fd in fds:
            os.close(fd)


def scan(dir_fd: int) -> Iterator[tuple[str, int]]:
    """(name, st_mode without following links) of each entry of the directory."""
    with os.scandir(dir_fd) as it:
        for e in it:
            try:
                yield e.name, e.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue


def _stat_entries(fd: int) -> list[tuple[str, os.stat_result]]:
    out = []
    with os.scandir(fd) as it:
        for e in it:
            try:
                out.append((e.name, e.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    return out


def walk(
    top: int, descend: Callable[[os.stat_result], bool] = lambda st: True
) -> Iterator[tuple[int, str, os.stat_result]]:
    """(directory fd, name, lstat) of every entry below the open directory
    `top`, depth first. Links are reported, never followed; a subdirectory is
    entered (when `descend` says so) only by opening it O_NOFOLLOW from its
    parent, so one swapped for a link meanwhile is skipped. One descriptor
    per level is held; the one yielded is valid until the next step."""
    stack: list[tuple[int, list[str]]] = []
    fd: int | None = os.dup(top)
    try:
        while True:
            if fd is not None:
                subdirs: list[str] = []
                stack.append((fd, subdirs))
                for name, st in _stat_entries(fd):
                    yield fd, name, st
                    if stat.S_ISDIR(st.st_mode) and descend(st):
                        subdirs.append(name)
                subdirs.reverse()
                fd = None
            if not stack:
                return
            parent, left = stack[-1]
            if not left:
                os.close(stack.pop()[0])
                continue
            try:
                fd = open_dir_at(parent, left.pop())
            except OSError:
                fd = None  # swapped for a link, or gone
    finally:
        for held, _ in stack:
            os.close(held)


def remove_all_at(parent_fd: int, name: str) -> None:
    """rm -rf of `name` below `parent_fd`, never following a symlink (links are
    unlinked) and never entering another mount (OSError EBUSY, nothing below
    the mount touched). A missing name is not an error."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    top = _open_subdir(parent_fd, name)
    try:
        _empty(top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent_fd)


def _open_subdir(parent_fd: int, name: str) -> int:
    fd = open_dir_at(parent_fd, name)
    if not same_mount(fd, parent_fd):
        os.close(fd)
        raise OSError(errno.EBUSY, "a filesystem is mounted there", name)
    return fd


def _unlink_files(fd: int) -> str | None:
    """Unlink every entry but directories; return one subdirectory's name."""
    sub = None
    for name, mode in scan(fd):
        if stat.S_ISDIR(mode):
            sub = sub or name
        else:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
    return sub


def _empty(top: int) -> None:
    """Remove everything below the open directory `top` (depth first, iterative)."""
    stack: list[tuple[int, str]] = []  # (fd, name in its parent) below top
    moved = 0
    try:
        while True:
            fd = stack[-1][0] if stack else top
            sub = _unlink_files(fd)
            if sub is None:
                if not stack:
                    return
                done, done_name = stack.pop()
                os.close(done)
                os.rmdir(done_name, dir_fd=stack[-1][0] if stack else top)
                continue
            if len(stack) >= MAX_HELD:
                # Flatten: the subtree moves up to top and is emptied from there.
                moved = _move_up(fd, sub, top, moved)
                continue
            stack.append((_open_subdir(fd, sub), sub))
    finally:
        for fd, _ in stack:
            os.close(fd)


def _move_up(fd: int, name: str, top: int, n: int) -> int:
    while True:
        n += 1
        try:
            os.rename(name, f".kubelet-rm.{n}", src_dir_fd=fd, dst_dir_fd=top)
            return n
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise


def mkdir_all(path: str, mode: int) -> None:
    """mkdir -p giving every directory it makes `mode` whatever the umask
    (os.makedirs gives the parents the default mode); existing ones keep theirs."""
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path and not os.path.isdir(parent):
        mkdir_all(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    os.chmod(path, mode)
