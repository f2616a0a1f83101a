"""Atomic projection of a set of files into a volume directory
(pkg/volume/util/atomic_writer.go upstream).

Layout, as upstream, so that tools and containers that know it (inotify on
`..data`) keep working:

    <dir>/..2026_11_23_13_36_47.1234567/   the real files of one version
    <dir>/..data -> ..2026_11_23_13_36_47.1234567
    <dir>/key    -> ..data/key             one symlink per top-level name

A new version is written into a fresh timestamped directory, fully, and only
then published by renaming a `..data_tmp` symlink over `..data`: rename(2) is
atomic, so a reader that resolves `..data` once sees exactly one version, and
no reader ever sees a half-written file. The previous directory and the
user-visible names that the new version dropped go after the swap.

`VolumeWriter` is what plugins use from the event loop: all file I/O runs in
the default executor, one write at a time per directory, and a payload equal
to the one last written is recognised without reading the files back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import secrets
import stat
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubelet.types import ContainerKind, Pod, containers_of
from kubelet.util import filesystem, mountutil
from kubelet.volume import ownership
from kubelet.volume import util as volume_util

log = logging.getLogger(__name__)

DATA_DIR = "..data"
NEW_DATA_DIR = "..data_tmp"
MAX_FILE_NAME = 255
MAX_PATH = 4096
# fsGroup: see volume/ownership.py (these volumes are all read-only).
# The volume root is world-writable as on upstream's wrapped emptyDir.
ROOT_DIR_MODE = 0o777
TS_DIR_MODE = 0o755
# `..2026_11_23_13_36_47.<random>`: a single component, as the writer names its
# versions (upstream's os.MkdirTemp gives digits; older writers here [a-z0-9_]).
_TS_NAME = re.compile(r"\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.[0-9A-Za-z_]{1,32}")


class PayloadError(ValueError):
    """A payload path is not acceptable (message as upstream's validatePath)."""


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int = 0o644
    # Owner of the file (the pod's single runAsUser, for service-account tokens).
    fs_user: int | None = None


def validate_path(path: str) -> None:
    if path == "":
        raise PayloadError('invalid path: must not be empty: ""')
    if os.path.isabs(path):
        raise PayloadError(f"invalid path: must be relative path: {path}")
    if len(path) > MAX_PATH:
        raise PayloadError(f"invalid path: must be less than or equal to {MAX_PATH} characters")
    parts = path.split("/")
    for part in parts:
        if part == "..":
            raise PayloadError(f"invalid path: must not contain '..': {path}")
        if len(part) > MAX_FILE_NAME:
            raise PayloadError(
                f"invalid path: filenames must be less than or equal to {MAX_FILE_NAME} characters"
            )
    # `..data`, `..data_tmp` and the timestamped dirs live in the same directory.
    if parts[0].startswith("..") and len(parts[0]) > 2:
        raise PayloadError(f"invalid path: must not start with '..': {path}")


def clean_payload(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    out: dict[str, FileProjection] = {}
    for path, content in payload.items():
        validate_path(path)
        clean = os.path.normpath(path)
        if clean == ".":
            raise PayloadError(f"invalid path: must not be empty: {path!r}")
        out[clean] = content
    return out


class AtomicWriter:
    """Writes payloads into one target directory. Blocking: call it from a
    worker thread (VolumeWriter does), never from the event loop. Not safe for
    two concurrent writes to the same directory (VolumeWriter serialises).

    Nothing found inside the directory is trusted: `..data` counts only when
    it names one of the writer's own timestamped directories directly in it,
    and every lookup, create, rename and removal below the directory is made
    relative to a directory descriptor without following links
    (kubelet/util/filesystem.py), so a link planted anywhere in the volume
    never leads the kubelet outside it."""

    def __init__(self, target_dir: str, log_context: str = "") -> None:
        self.target_dir = target_dir
        self.log_context = log_context or target_dir

    def write(self, payload: Mapping[str, FileProjection], fs_group: int | None = None) -> bool:
        """Project `payload`; return False when the volume already held exactly
        this content (nothing touched), True when a new version was published.
        Raises PayloadError for a bad path, OSError for I/O failures."""
        files = clean_payload(payload)
        root = filesystem.open_dir(self.target_dir)
        try:
            return self._write(root, files, fs_group)
        finally:
            os.close(root)

    def _write(self, root: int, files: Mapping[str, FileProjection], fs_group: int | None) -> bool:
        old = self._current(root)
        old_names: set[str] = set()
        if old is not None:
            try:
                if _tree_equals(old, files):
                    # Same content: only make sure the user-visible links are
                    # right (an interrupted write may have left one out).
                    self._link_user_visible(root, files)
                    return False
                old_names = {name for name, _ in filesystem.scan(old)}
            finally:
                os.close(old)
        ts_name = self._publish(root, files, fs_group)
        # Published. New top-level names were dangling until now; stale ones go.
        self._link_user_visible(root, files)
        self._remove_user_visible(root, old_names, {rel.split("/", 1)[0] for rel in files})
        if fs_group is not None:
            ownership.set_fd(root, fs_group, read_only=True)
        self._remove_stale_versions(root, ts_name)
        return True

    def _current(self, root: int) -> int | None:
        """The published version's directory, opened; None when there is none
        that this writer made (a planted `..data` is logged and replaced)."""
        try:
            name = os.readlink(DATA_DIR, dir_fd=root)
        except FileNotFoundError:
            return None
        except OSError as err:
            log.warning("%s: %s is not a symlink (%s): writing a new version", self.log_context,
                        DATA_DIR, err)  # fmt: skip
            return None
        if not is_ts_name(name):
            log.warning("%s: %s points at %r, not a version of this writer: writing a new "
                        "version", self.log_context, DATA_DIR, name)  # fmt: skip
            return None
        try:
            fd = filesystem.open_dir_at(root, name)
        except OSError as err:
            log.warning("%s: %s -> %r is not a directory of this volume (%s): writing a new "
                        "version", self.log_context, DATA_DIR, name, err)  # fmt: skip
            return None
        if not filesystem.same_mount(fd, root):
            os.close(fd)
            log.warning("%s: %s -> %r is a mount point: writing a new version",
                        self.log_context, DATA_DIR, name)  # fmt: skip
            return None
        return fd

    def _publish(self, root: int, files: Mapping[str, FileProjection], fs_group: int | None) -> str:
        """Write a new version and swap `..data` to it; return its name."""
        ts_name = _new_ts_dir(root)
        try:
            ts = filesystem.open_dir_at(root, ts_name)
            try:
                _write_files(ts, files, fs_group)
            finally:
                os.close(ts)
            filesystem.remove_all_at(root, NEW_DATA_DIR)  # left by a crash (or planted)
            os.symlink(ts_name, NEW_DATA_DIR, dir_fd=root)
            self._swap_data_link(root)
        except BaseException:
            _remove_quietly(root, NEW_DATA_DIR, self.log_context)
            _remove_quietly(root, ts_name, self.log_context)
            raise
        return ts_name

    def _swap_data_link(self, root: int) -> None:
        try:
            os.rename(NEW_DATA_DIR, DATA_DIR, src_dir_fd=root, dst_dir_fd=root)
            return
        except IsADirectoryError:
            pass
        # A directory squats `..data`: nobody reads a version through it.
        log.warning("%s: %s is a directory: removing it", self.log_context, DATA_DIR)
        filesystem.remove_all_at(root, DATA_DIR)
        os.rename(NEW_DATA_DIR, DATA_DIR, src_dir_fd=root, dst_dir_fd=root)

    def _remove_stale_versions(self, root: int, current: str) -> None:
        # The previous version, versions a crash left unpublished, and any
        # other `..` name (the payload cannot have one): links are unlinked,
        # directories emptied without following links or crossing mounts.
        for name, _ in list(filesystem.scan(root)):
            if name.startswith("..") and name not in (DATA_DIR, current):
                _remove_quietly(root, name, self.log_context)

    def _link_user_visible(self, root: int, files: Iterable[str]) -> None:
        for top in {rel.split("/", 1)[0] for rel in files}:
            want = f"{DATA_DIR}/{top}"
            try:
                st = os.stat(top, dir_fd=root, follow_symlinks=False)
            except FileNotFoundError:
                os.symlink(want, top, dir_fd=root)
                continue
            if not stat.S_ISLNK(st.st_mode):
                # A real file or dir squats the name (e.g. a nested mount
                # point): leave it, as upstream does.
                log.warning("%s: %s exists and is not a symlink", self.log_context, top)
                continue
            if os.readlink(top, dir_fd=root) == want:
                continue
            log.warning("%s: %s was re-pointed: restoring it", self.log_context, top)
            os.unlink(top, dir_fd=root)
            os.symlink(want, top, dir_fd=root)

    def _remove_user_visible(self, root: int, old_names: set[str], keep: set[str]) -> None:
        """Unlink the user-visible links the new version dropped: the names of
        the old version, and any `name -> ..data/name` link (the old version
        may have been untrusted). Only links: a real file or directory there
        is not the writer's."""
        for name, mode in list(filesystem.scan(root)):
            if name in keep or name.startswith("..") or not stat.S_ISLNK(mode):
                continue
            if name in old_names or os.readlink(name, dir_fd=root) == f"{DATA_DIR}/{name}":
                os.unlink(name, dir_fd=root)


def is_ts_name(name: str) -> bool:
    """One of the writer's own version directories (upstream's name pattern too)."""
    return _TS_NAME.fullmatch(name) is not None


def _new_ts_dir(root: int) -> str:
    prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    while True:
        name = f"{prefix}{secrets.randbelow(1 << 32)}"
        try:
            os.mkdir(name, TS_DIR_MODE, dir_fd=root)
        except FileExistsError:
            continue
        fd = filesystem.open_dir_at(root, name)
        try:
            # Explicit: group and others must search the tree whatever the umask.
            os.fchmod(fd, TS_DIR_MODE)
        finally:
            os.close(fd)
        return name


def _remove_quietly(root: int, name: str, context: str) -> None:
    try:
        filesystem.remove_all_at(root, name)
    except OSError as err:
        log.warning("%s: cannot remove %s: %s", context, name, err)


def _write_files(ts: int, files: Mapping[str, FileProjection], fs_group: int | None) -> None:
    """Write the payload below the fresh version directory `ts`."""
    dirs: dict[str, int] = {"": ts}
    try:
        for rel, proj in files.items():
            parent, _, name = rel.rpartition("/")
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=_subdir(dirs, parent, fs_group),
            )
            try:
                view = memoryview(proj.data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                # Explicit: the mode must not depend on the kubelet's umask.
                os.fchmod(fd, proj.mode & 0o7777)
                if proj.fs_user is not None:
                    os.fchown(fd, proj.fs_user, -1)
                if fs_group is not None:
                    ownership.set_fd(fd, fs_group, read_only=True)
            finally:
                os.close(fd)
        if fs_group is not None:
            ownership.set_fd(ts, fs_group, read_only=True)
    finally:
        for rel, fd in dirs.items():
            if rel:
                os.close(fd)


def _subdir(dirs: dict[str, int], rel: str, fs_group: int | None) -> int:
    """The open directory `rel` below the version dir, made if missing."""
    fd = dirs.get(rel)
    if fd is not None:
        return fd
    parent, _, name = rel.rpartition("/")
    pfd = _subdir(dirs, parent, fs_group)
    try:
        os.mkdir(name, TS_DIR_MODE, dir_fd=pfd)
    except FileExistsError:
        pass
    fd = filesystem.open_dir_at(pfd, name)
    dirs[rel] = fd
    os.fchmod(fd, TS_DIR_MODE)
    if fs_group is not None:
        ownership.set_fd(fd, fs_group, read_only=True)
    return fd


def _with_parents(files: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _same_file(dir_fd: int, name: str, data: bytes) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)  # fmt: skip
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        got = bytearray()
        while len(got) <= len(data):
            chunk = os.read(fd, len(data) + 1 - len(got))
            if not chunk:
                break
            got += chunk
        return got == data
    finally:
        os.close(fd)


def _tree_equals(old: int, files: Mapping[str, FileProjection]) -> bool:
    """True when the version directory `old` holds exactly `files`: the same
    paths, each a regular file with the same content, and nothing else (no
    link, no extra name). Modes are fixed by the pod spec, which cannot
    change, so content and paths decide, as upstream. The walk never goes
    deeper than the payload, nor through a link."""
    expected = _with_parents(files)
    seen = 0
    stack: list[tuple[str, int]] = [("", os.dup(old))]
    try:
        while stack:
            rel, fd = stack.pop()
            try:
                for name, mode in filesystem.scan(fd):
                    path = f"{rel}/{name}" if rel else name
                    if path not in expected:
                        return False
                    seen += 1
                    if path in files:
                        if not stat.S_ISREG(mode) or not _same_file(fd, name, files[path].data):
                            return False
                    elif stat.S_ISDIR(mode):
                        stack.append((path, filesystem.open_dir_at(fd, name)))
                    else:
                        return False
            finally:
                os.close(fd)
    except OSError:
        return False  # swapped while walked: not the version we wrote
    finally:
        for _, fd in stack:
            os.close(fd)
    return seen == len(expected)


def make_nested_mountpoints(pod: Pod, volume_name: str, dir: str) -> None:
    """Create the directories inside this volume on which other volumes of the
    same container are mounted (MakeNestedMountpoints upstream): a bind mount
    needs its target to exist, and the volume itself is read-only inside the
    container. Each is made one component at a time below the volume's
    descriptor; a link on the way is followed only while it stays inside the
    volume. Blocking."""
    rels = _nested_mountpoints(pod, volume_name)
    if not rels:
        return
    root = filesystem.open_dir(dir)
    try:
        for rel in rels:
            try:
                os.close(filesystem.open_beneath(root, rel, create_mode=0o755))
            except OSError as err:
                raise PayloadError(
                    f"unable to create nested volume mountpoints: {rel}: {err.strerror}"
                ) from err
    finally:
        os.close(root)


def _nested_mountpoints(pod: Pod, volume_name: str) -> list[str]:
    spec = pod.get("spec") or {}
    out: list[str] = []
    kinds: tuple[ContainerKind, ...] = ("initContainers", "containers", "ephemeralContainers")
    for kind in kinds:
        for c in containers_of(spec, kind):
            mounts = c.get("volumeMounts") or []
            for m in mounts:
                if m.get("name") != volume_name:
                    continue
                base = (m.get("mountPath") or "").rstrip("/") + "/"
                for other in mounts:
                    path = other.get("mountPath") or ""
                    if other is m or not path.startswith(base):
                        continue
                    rel = path[len(base) :].strip("/")
                    if not rel:
                        continue
                    parts = rel.split("/")
                    if ".." in parts:
                        raise PayloadError(f"{path} contains '..'")
                    # Names starting with '..' are the writer's own.
                    if parts[0].startswith(".."):
                        raise PayloadError(f"{path} cannot start with '..'")
                    out.append(rel)
    return out


def _digest(files: Mapping[str, FileProjection], fs_group: int | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(fs_group).encode())
    for rel in sorted(files):
        p = files[rel]
        h.update(f"\0{rel}\0{p.mode}\0{p.fs_user}\0{len(p.data)}\0".encode())
        h.update(p.data)
    return h.digest()


class VolumeWriter:
    """The event-loop face of AtomicWriter for one plugin: set_up and
    tear_down of API-backed volumes (configMap, secret, downwardAPI,
    projected) whose root is a plain directory (upstream wraps an emptyDir)."""

    def __init__(self, memory_backed: bool = False, mountinfo: str = mountutil.MOUNTINFO) -> None:
        # Secrets and projected tokens live on a tmpfs, as upstream: never on disk.
        self.memory_backed = memory_backed
        self.mountinfo = mountinfo
        # Writes to one directory are serialised; the locks go with their last user.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # dir -> digest of the payload last published there, so that the
        # periodic remount of an unchanged volume reads nothing back.
        self._written: dict[str, bytes] = {}

    def _lock(self, dir: str) -> asyncio.Lock:
        lock = self._locks.get(dir)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[dir] = lock
        return lock

    async def write(
        self,
        pod: Pod,
        volume_name: str,
        dir: str,
        payload: Mapping[str, FileProjection],
        fs_group: int | None = None,
    ) -> bool:
        """Publish `payload` in `dir` (created if missing); False when nothing changed."""
        md = pod.get("metadata") or {}
        context = f"pod {md.get('namespace', '')}/{md.get('name', '')} volume {volume_name}"
        loop = asyncio.get_running_loop()
        lock = self._lock(dir)
        async with lock:
            changed, digest = await loop.run_in_executor(
                None,
                _set_up_dir,
                pod,
                volume_name,
                dir,
                payload,
                fs_group,
                context,
                self._written.get(dir),
                self.mountinfo if self.memory_backed else None,
            )
            self._written[dir] = digest
        return changed

    async def remove(self, dir: str) -> None:
        loop = asyncio.get_running_loop()
        async with self._lock(dir):
            self._written.pop(dir, None)
            # Unmounts a tmpfs first; never deletes through another mount.
            await loop.run_in_executor(None, volume_util.unmount_and_remove, dir, "unlinkat")


def _published(dir: str) -> bool:
    """`..data` names one of the writer's versions, which is a directory."""
    try:
        name = os.readlink(os.path.join(dir, DATA_DIR))
        return is_ts_name(name) and stat.S_ISDIR(os.lstat(os.path.join(dir, name)).st_mode)
    except OSError:
        return False


def _set_up_dir(
    pod: Pod,
    volume_name: str,
    dir: str,
    payload: Mapping[str, FileProjection],
    fs_group: int | None,
    context: str,
    last_digest: bytes | None,
    tmpfs_mountinfo: str | None,
) -> tuple[bool, bytes]:
    """tmpfs_mountinfo: mount a tmpfs at dir first (read the mount table there)."""
    # Hashing a large payload is CPU work too: done here, off the loop.
    digest = _digest(payload, fs_group)
    if digest == last_digest and _published(dir):
        return False, digest
    clean_payload(payload)  # bad paths fail before anything is created
    try:
        os.mkdir(dir, ROOT_DIR_MODE)
        os.chmod(dir, ROOT_DIR_MODE)  # the umask applied to mkdir
    except FileExistsError:
        pass
    except FileNotFoundError:
        filesystem.mkdir_all(os.path.dirname(dir), 0o750)
        os.mkdir(dir, ROOT_DIR_MODE)
        os.chmod(dir, ROOT_DIR_MODE)
    if tmpfs_mountinfo is not None:
        volume_util.ensure_tmpfs(dir, 0, f"volume {volume_name}", tmpfs_mountinfo)
        os.chmod(dir, ROOT_DIR_MODE)  # the tmpfs root's own mode
    make_nested_mountpoints(pod, volume_name, dir)
    return AtomicWriter(dir, context).write(payload, fs_group), digest
