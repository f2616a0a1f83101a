"""Static pods from a folder or a single file (pkg/kubelet/config/file*.go).

Re-read every fileCheckFrequency and, sooner, whenever inotify reports a
change in the folder. A file that cannot be read or decoded is logged with
its name and reason and skipped; the other pods are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from kubelet.config.common import ManifestError, decode_manifest, static_pod
from kubelet.config.config import PodConfig
from kubelet.types import FILE_SOURCE, Pod
from kubelet.util import inotify

log = logging.getLogger(__name__)

_MASK = (
    inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_MODIFY
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ATTRIB
)


# (path) -> (mtime_ns, ctime_ns, size, inode, node name, gate), pods or error: a file that
# did not change is not parsed again (re-reading thousands of manifests every
# fileCheckFrequency would otherwise cost a steady slice of a core). ctime is in
# the key because tools restore mtime (cp -p, rsync -t, tar) but cannot set ctime.
_Key = tuple[int, int, int, int, str, bool]
_parsed: dict[str, tuple[_Key, list[Pod] | None, str | None]] = {}
# A file changed this recently is parsed again next time: a second write within
# one tick of the filesystem's coarse clock leaves every stat field as it was.
_RACY_SECONDS = 2.0


def _read_file(f: str, node_name: str, prevent_refs: bool) -> tuple[list[Pod], str | None]:
    try:
        st = os.stat(f)
    except OSError as err:
        return [], f"{f}: {err}"
    key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, node_name, prevent_refs)
    hit = _parsed.get(f)
    if hit is not None and hit[0] == key:
        # Pods are read-only once built: the cached ones can be shared.
        return list(hit[1] or []), hit[2]
    pods_out: list[Pod] = []
    error: str | None = None
    try:
        with open(f, "rb") as fh:
            data = fh.read()
        for doc in decode_manifest(data):
            pods_out.append(static_pod(doc, f, FILE_SOURCE, node_name, prevent_refs))
    except (OSError, ManifestError) as err:
        error = f"{f}: {err}"
    except Exception as err:  # a hostile file's structure must not hide the other files
        error = f"{f}: invalid manifest: {err!r}"
    if error:
        pods_out = []
    if time.time() - max(st.st_mtime, st.st_ctime) > _RACY_SECONDS:
        _parsed[f] = (key, pods_out, error)
    else:
        _parsed.pop(f, None)
    return pods_out, error


def read_pods(path: str, node_name: str, prevent_refs: bool = True) -> tuple[list[Pod], list[str]]:
    """(pods, errors) for a folder or one file. Blocking: run it off the event loop.
    prevent_refs: the PreventStaticPodAPIReferences gate."""
    by_file, errors = read_pods_by_file(path, node_name, prevent_refs)
    return [p for pods in by_file.values() for p in pods], errors


def read_pods_by_file(
    path: str, node_name: str, prevent_refs: bool = True
) -> tuple[dict[str, list[Pod]], list[str]]:
    """read_pods, with each file's pods apart (in file name order)."""
    is_dir = os.path.isdir(path)
    if is_dir:
        try:
            names = sorted(n for n in os.listdir(path) if not n.startswith("."))
        except OSError as err:
            return {}, [f"{path}: {err}"]
        files = [os.path.join(path, n) for n in names]
        files = [f for f in files if os.path.isfile(f)]
    elif os.path.exists(path):
        files = [path]
    else:
        return {}, []
    pods: dict[str, list[Pod]] = {}
    errors: list[str] = []
    for f in files:
        pods[f], error = _read_file(f, node_name, prevent_refs)
        if error:
            errors.append(error)
    # Forget the files of this source that are gone (the cache is shared by sources).
    for gone in set(_parsed) - set(files):
        if (is_dir and os.path.dirname(gone) == os.path.normpath(path)) or gone == path:
            _parsed.pop(gone, None)
    return pods, errors


class FileSource:
    def __init__(
        self,
        path: str,
        node_name: str,
        period: float,
        config: PodConfig,
        prevent_refs: bool = True,
    ) -> None:
        self.path = path
        self.node_name = node_name
        self.prevent_refs = prevent_refs
        self.period = period
        self.config = config
        self._reported: set[str] = set()
        self._dirty = asyncio.Event()
        self.reads = 0
        self._by_file: dict[str, list[Pod]] = {}  # what the last read published
        self._gone: set[str] = set()  # files inotify saw deleted since the last read

    async def read_once(self) -> None:
        loop = asyncio.get_running_loop()
        by_file, errors = await loop.run_in_executor(
            None, read_pods_by_file, self.path, self.node_name, self.prevent_refs
        )
        self.reads += 1
        for e in errors:
            # Once per distinct problem, not on every periodic re-read.
            if e not in self._reported:
                log.error("Could not process manifest file %s", e)
        self._reported = set(errors)
        self._publish_removals()
        self._by_file = by_file
        self.config.set_pods(FILE_SOURCE, [p for pods in by_file.values() for p in pods])

    def _publish_removals(self) -> None:
        """A manifest deleted and written again before the read (`rm f; cp f`) is
        still a removal and an addition, as upstream's per-event store tells it:
        its pod stops and starts again, even with the same content (and UID)."""
        gone = {f for f in self._by_file if os.path.normpath(f) in self._gone}
        self._gone = set()
        if any(self._by_file[f] for f in gone):
            kept = [p for f, pods in self._by_file.items() if f not in gone for p in pods]
            self.config.set_pods(FILE_SOURCE, kept)

    def _target(self) -> str:
        return self.path if os.path.isdir(self.path) else os.path.dirname(self.path) or "."

    def _watch(self, loop: asyncio.AbstractEventLoop) -> inotify.Inotify | None:
        target = self._target()
        try:
            ino = inotify.Inotify()
            ino.add_watch(target, _MASK)
        except OSError as err:
            log.warning(
                "inotify on %s unavailable (%s); polling every %ss", target, err, self.period
            )
            return None

        def readable() -> None:
            events = ino.read_events()
            for _wd, mask, name in events:
                if mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM):
                    self._gone.add(os.path.normpath(os.path.join(target, name)))
            if events:
                self._dirty.set()

        loop.add_reader(ino.fileno(), readable)
        return ino

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        ino = self._watch(loop)
        watching = self._target()
        try:
            while not stop.is_set():
                if ino is not None and self._target() != watching:
                    # The folder appeared (or went) after the watch was set up
                    # (kubeadm creates it later): watch where the files now are.
                    loop.remove_reader(ino.fileno())
                    ino.close()
                    ino = self._watch(loop)
                    watching = self._target()
                self._dirty.clear()
                try:
                    await self.read_once()
                except Exception:  # the watch goes on: the next change or period reads again
                    log.exception("reading static pods from %s failed", self.path)
                waiter = asyncio.ensure_future(self._dirty.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait(
                    {waiter, stopper}, timeout=self.period, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                stopper.cancel()
                if self._dirty.is_set():
                    # Let a burst of writes (editors, cp of many files) settle.
                    await asyncio.sleep(0.1)
        finally:
            if ino is not None:
                loop.remove_reader(ino.fileno())
                ino.close()
