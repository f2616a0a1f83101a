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
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubelet.volume import ownership
from kubelet.volumemanager import mountutil

log = logging.getLogger(__name__)

DATA_DIR = "..data"
NEW_DATA_DIR = "..data_tmp"
MAX_FILE_NAME = 255
MAX_PATH = 4096
# fsGroup: see volume/ownership.py (these volumes are all read-only).
# The volume root is world-writable as on upstream's wrapped emptyDir.
ROOT_DIR_MODE = 0o777


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
    two concurrent writes to the same directory (VolumeWriter serialises)."""

    def __init__(self, target_dir: str, log_context: str = "") -> None:
        self.target_dir = target_dir
        self.log_context = log_context or target_dir

    def write(self, payload: Mapping[str, FileProjection], fs_group: int | None = None) -> bool:
        """Project `payload`; return False when the volume already held exactly
        this content (nothing touched), True when a new version was published.
        Raises PayloadError for a bad path, OSError for I/O failures."""
        files = clean_payload(payload)
        if not os.path.isdir(self.target_dir):
            raise FileNotFoundError(
                errno.ENOENT, "target directory does not exist", self.target_dir
            )
        data_link = os.path.join(self.target_dir, DATA_DIR)
        try:
            old_ts = os.readlink(data_link)
        except FileNotFoundError:
            old_ts = ""
        old_ts_path = os.path.join(self.target_dir, old_ts) if old_ts else ""
        if old_ts_path and os.path.isdir(old_ts_path):
            old_paths = _walk(old_ts_path)
            if not _differs(files, old_ts_path, old_paths):
                # Same content: only make sure the user-visible links exist
                # (an interrupted earlier write may have left one out).
                self._link_user_visible(files)
                return False
        else:
            old_paths = set()

        ts_dir = self._new_ts_dir()
        ts_name = os.path.basename(ts_dir)
        try:
            self._write_files(files, ts_dir)
            if fs_group is not None:
                ownership.set_volume_ownership(ts_dir, fs_group, read_only=True)
            new_link = os.path.join(self.target_dir, NEW_DATA_DIR)
            try:
                os.unlink(new_link)  # left by a crash between symlink and rename
            except FileNotFoundError:
                pass
            os.symlink(ts_name, new_link)
            try:
                os.rename(new_link, data_link)
            except OSError:
                os.unlink(new_link)
                raise
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
        # Published. New top-level names were dangling until now; stale ones go.
        self._link_user_visible(files)
        self._remove_user_visible(old_paths - _with_parents(files))
        if fs_group is not None:
            ownership.set_one(self.target_dir, fs_group, read_only=True)
        if old_ts_path:
            shutil.rmtree(old_ts_path, ignore_errors=True)
        self._remove_orphan_ts_dirs(ts_name)
        return True

    def _remove_orphan_ts_dirs(self, current: str) -> None:
        # Versions that a crash left unpublished (written, never swapped in).
        with os.scandir(self.target_dir) as it:
            for e in it:
                if (
                    e.name.startswith("..")
                    and e.name not in (DATA_DIR, NEW_DATA_DIR, current)
                    and e.is_dir(follow_symlinks=False)
                ):
                    shutil.rmtree(e.path, ignore_errors=True)

    def _new_ts_dir(self) -> str:
        prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        path = tempfile.mkdtemp(prefix=prefix, dir=self.target_dir)
        # mkdtemp makes 0700; group and others must be able to search the tree.
        os.chmod(path, 0o755)
        return path

    def _write_files(self, files: Mapping[str, FileProjection], ts_dir: str) -> None:
        for rel, proj in files.items():
            full = os.path.join(ts_dir, rel)
            parent = os.path.dirname(full)
            if parent != ts_dir:
                os.makedirs(parent, exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(proj.data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                # Explicit: the mode must not depend on the kubelet's umask.
                os.fchmod(fd, proj.mode & 0o7777)
                if proj.fs_user is not None:
                    os.fchown(fd, proj.fs_user, -1)
            finally:
                os.close(fd)

    def _link_user_visible(self, files: Iterable[str]) -> None:
        for top in {rel.split("/", 1)[0] for rel in files}:
            link = os.path.join(self.target_dir, top)
            if os.path.islink(link):
                continue
            try:
                os.symlink(os.path.join(DATA_DIR, top), link)
            except FileExistsError:
                # A real file or dir squats the name (e.g. a nested mount
                # point): leave it, as upstream does.
                log.warning("%s: %s exists and is not a symlink", self.log_context, link)

    def _remove_user_visible(self, paths: Iterable[str]) -> None:
        for rel in paths:
            if "/" in rel:
                continue  # only top-level names are user-visible links
            link = os.path.join(self.target_dir, rel)
            if os.path.islink(link):
                os.unlink(link)


def _walk(root: str) -> set[str]:
    """Every file and directory below `root`, relative to it."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            out.add(name if rel == "." else f"{rel}/{name}")
    return out


def _with_parents(files: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _differs(files: Mapping[str, FileProjection], ts_path: str, old_paths: set[str]) -> bool:
    """True when the published version is not exactly `files` (content, or a
    path added or dropped). Modes are fixed by the pod spec, which cannot
    change, so content and paths decide, as upstream."""
    if old_paths != _with_parents(files):
        return True
    for rel, proj in files.items():
        try:
            with open(os.path.join(ts_path, rel), "rb") as fh:
                if fh.read(len(proj.data) + 1) != proj.data:
                    return True
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return True
    return False


def make_nested_mountpoints(pod: Mapping[str, Any], volume_name: str, dir: str) -> None:
    """Create the directories inside this volume on which other volumes of the
    same container are mounted (MakeNestedMountpoints upstream): a bind mount
    needs its target to exist, and the volume itself is read-only inside the
    container. Blocking."""
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
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
                    os.makedirs(os.path.join(dir, rel), 0o755, exist_ok=True)


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
        pod: Mapping[str, Any],
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
            await loop.run_in_executor(
                None, mountutil.unmount_and_remove, dir, "unlinkat", self.mountinfo
            )


def _set_up_dir(
    pod: Mapping[str, Any],
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
    if digest == last_digest and os.path.isdir(os.path.join(dir, DATA_DIR)):
        return False, digest
    clean_payload(payload)  # bad paths fail before anything is created
    try:
        os.mkdir(dir, ROOT_DIR_MODE)
        os.chmod(dir, ROOT_DIR_MODE)  # the umask applied to mkdir
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(dir), 0o750, exist_ok=True)
        os.mkdir(dir, ROOT_DIR_MODE)
        os.chmod(dir, ROOT_DIR_MODE)
    if tmpfs_mountinfo is not None:
        mountutil.ensure_tmpfs(dir, 0, f"volume {volume_name}", tmpfs_mountinfo)
        os.chmod(dir, ROOT_DIR_MODE)  # the tmpfs root's own mode
    make_nested_mountpoints(pod, volume_name, dir)
    return AtomicWriter(dir, context).write(payload, fs_group), digest
