"""The plugin socket watcher (pluginwatcher upstream): the registry dir and its
subdirs, through inotify; every Unix socket found or created there is a plugin
to register, every one removed a plugin to deregister. Names starting with a
dot are ignored, as upstream. Links are never followed: only a socket file
itself counts, and only real subdirectories are descended into.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable

from kubelet.util import inotify

log = logging.getLogger(__name__)

_MASK = (
    inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_MOVED_TO
    | inotify.IN_MOVED_FROM
    | inotify.IN_DELETE_SELF
)
# A registry tree this deep is not a plugin layout; stop descending.
MAX_DEPTH = 8


class PluginWatcher:
    """Calls on_add(path) for each socket that appears (or is there at start)
    and on_remove(path) for each that goes away."""

    def __init__(
        self,
        path: str,
        on_add: Callable[[str], None],
        on_remove: Callable[[str], None],
    ) -> None:
        self.path = path.rstrip("/") or "/"
        self.on_add = on_add
        self.on_remove = on_remove
        self._ino: inotify.Inotify | None = None
        self._dirs: dict[int, str] = {}  # watch descriptor -> dir
        self._sockets: dict[str, int] = {}  # socket path -> inode

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the dir, watch it, report the sockets already there."""
        os.makedirs(self.path, mode=0o750, exist_ok=True)
        self._ino = inotify.Inotify()
        loop.add_reader(self._ino.fileno(), self._readable)
        self._traverse(self.path, 0)

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._ino is not None:
            loop.remove_reader(self._ino.fileno())
            self._ino.close()
            self._ino = None

    def _depth(self, path: str) -> int:
        rel = os.path.relpath(path, self.path)
        return 0 if rel == "." else rel.count("/") + 1

    def _traverse(self, dir: str, depth: int) -> None:
        assert self._ino is not None
        try:
            wd = self._ino.add_watch(dir, _MASK | inotify.IN_ONLYDIR | inotify.IN_DONT_FOLLOW)
        except OSError as err:
            log.error("Plugin watcher cannot watch %s: %s", dir, err)
            return
        self._dirs[wd] = dir
        try:
            with os.scandir(dir) as it:
                entries = list(it)
        except OSError as err:
            log.error("Plugin watcher cannot list %s: %s", dir, err)
            return
        for e in entries:
            self._consider(e.path, depth + 1)

    def _consider(self, path: str, depth: int) -> None:
        name = os.path.basename(path)
        if name.startswith("."):
            return
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as err:
            log.error("Plugin watcher cannot stat %s: %s", path, err)
            return
        if stat.S_ISDIR(st.st_mode):
            if depth < MAX_DEPTH:
                self._traverse(path, depth)
            else:
                log.warning("Plugin watcher: %s is more than %d levels deep; not watched",
                            path, MAX_DEPTH)  # fmt: skip
        elif stat.S_ISSOCK(st.st_mode) and self._sockets.get(path) != st.st_ino:
            # The same socket seen twice (its create event and the listing of
            # a new dir) is one plugin; a new inode is a new incarnation.
            self._sockets[path] = st.st_ino
            self.on_add(path)

    def _readable(self) -> None:
        if self._ino is None:
            return
        for wd, mask, name in self._ino.read_events():
            dir = self._dirs.get(wd)
            if dir is None:
                continue
            if mask & inotify.IN_DELETE_SELF:
                self._dirs.pop(wd, None)
                self._removed_under(dir)
                continue
            if mask & inotify.IN_IGNORED or not name:
                continue
            path = os.path.join(dir, name)
            if mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO):
                self._consider(path, self._depth(path))
            elif mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM):
                if self._sockets.pop(path, None) is not None:
                    self.on_remove(path)
                elif mask & inotify.IN_MOVED_FROM:
                    self._removed_under(path)  # a subdir moved away

    def _removed_under(self, dir: str) -> None:
        prefix = dir.rstrip("/") + "/"
        for path in [p for p in self._sockets if p.startswith(prefix)]:
            del self._sockets[path]
            self.on_remove(path)
