"""Container log rotation (pkg/kubelet/logs/container_log_manager.go upstream).

Every monitor interval the manager lists the running containers (one
ListContainers; their IDs are read from the raw response), stats their log
files in one executor call, and rotates each log at or over ``max_size``,
``max_workers`` at a time:

1. leftovers of an interrupted rotation go: ``*.tmp`` files, and plain rotated
   files whose ``.gz`` already exists;
2. the oldest rotated files go until ``max_files - 2`` remain (the one about to
   be rotated and the new live log make ``max_files``);
3. every remaining rotated file is gzipped to ``<file>.gz``;
4. the live log is renamed ``<log>.<YYYYmmdd-HHMMSS>`` (local time) and the
   runtime is asked to ReopenContainerLog; if that fails the file is renamed
   back, to be rotated on a later round.

A log rotated already within the current second waits for the next round, so
two rotations never share a name. So the newest rotated file stays plain (the runtime may still be finishing a
write to it, and a follower may still be reading it) and the rest are gzipped.
A log that has vanished is reopened first, as upstream does.

A container's log path is only in its ContainerStatus: it is asked once per
container and cached (upstream asks every container on every round, which at
5,000 containers and 10 s is 500 calls a second).
"""

from __future__ import annotations

import asyncio
import glob
import gzip
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.rawlist import container_ids
from kubelet.cri.types import RuntimeService
from kubelet.util.quantity import to_bytes

if TYPE_CHECKING:
    from kubelet.apis.config import KubeletConfiguration

log = logging.getLogger(__name__)

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"  # Go's "20060102-150405"
COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"
STATUS_CONCURRENCY = 16  # ContainerStatus calls in flight while learning log paths
GZIP_LEVEL = 6  # compress/gzip's DefaultCompression


@dataclass(frozen=True)
class LogRotatePolicy:
    max_size: int = 10 * 1024 * 1024  # bytes; < 0: rotation off
    max_files: int = 5

    def __post_init__(self) -> None:
        if self.max_files <= 1:
            raise ValueError(f"invalid MaxFiles {self.max_files}, must be > 1")


def parse_max_size(size: str | int) -> int:
    """containerLogMaxSize (a quantity such as "10Mi") in bytes."""
    try:
        return to_bytes(size)
    except ValueError as err:
        raise ValueError(f"failed to parse container log max size {size!r}: {err}") from None


class ContainerLogManager:
    def __init__(
        self,
        runtime: RuntimeService,
        policy: LogRotatePolicy | None = None,
        *,
        max_workers: int = 1,
        monitor_interval: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` gives the wall time the rotated files are named after."""
        self.runtime = runtime
        self.policy = policy or LogRotatePolicy()
        self.max_workers = max(1, max_workers)
        self.monitor_interval = monitor_interval
        self.clock = clock
        self._paths: dict[str, str] = {}  # container ID -> log path (never changes)
        self._lock = asyncio.Lock()  # a round and clean() never interleave

    @classmethod
    def from_config(
        cls, config: KubeletConfiguration, runtime: RuntimeService, **kw: Any
    ) -> ContainerLogManager:
        """containerLogMaxSize, containerLogMaxFiles, containerLogMaxWorkers and
        containerLogMonitorInterval; raises ValueError as NewContainerLogManager does."""
        policy = LogRotatePolicy(
            max_size=parse_max_size(config.container_log_max_size),
            max_files=config.container_log_max_files,
        )
        return cls(
            runtime,
            policy,
            max_workers=config.container_log_max_workers,
            monitor_interval=config.container_log_monitor_interval,
            **kw,
        )

    @property
    def enabled(self) -> bool:
        return self.policy.max_size >= 0

    async def run(self, stop: asyncio.Event) -> None:
        """A round now, then every monitor interval until `stop` is set."""
        if not self.enabled:
            await stop.wait()
            return
        while not stop.is_set():
            try:
                await self.rotate_logs()
            except Exception as err:  # the next interval rotates again
                log.error("Failed to rotate container logs: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), self.monitor_interval)
            except TimeoutError:
                pass

    async def rotate_logs(self) -> list[str]:
        """One round; returns the IDs of the containers whose log was rotated."""
        if not self.enabled:
            return []
        async with self._lock:
            # Only the IDs are needed: read them from the raw response rather than
            # build a Container message per container (10,000 a round at density).
            ids = container_ids(
                await self.runtime.list_containers_raw(
                    pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
                )
            )
            live = set(ids)
            for gone in [cid for cid in self._paths if cid not in live]:
                del self._paths[gone]
            await self._learn_paths([cid for cid in ids if cid not in self._paths])
            todo = [(cid, self._paths[cid]) for cid in ids if cid in self._paths]
            loop = asyncio.get_running_loop()
            sizes = await loop.run_in_executor(None, _sizes, [p for _, p in todo])
            due = [
                (cid, path)
                for (cid, path), size in zip(todo, sizes, strict=True)
                if size is None or size >= self.policy.max_size
            ]
            if not due:
                return []
            rotated: list[str] = []
            queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
            for item in due:
                queue.put_nowait(item)

            async def worker() -> None:
                while not queue.empty():
                    cid, path = queue.get_nowait()
                    if await self._process(cid, path):
                        rotated.append(cid)

            await asyncio.gather(*(worker() for _ in range(min(self.max_workers, len(due)))))
            return rotated

    async def clean(self, container_id: str) -> None:
        """Remove every log file of a container, rotated ones included (Clean upstream)."""
        async with self._lock:
            resp = await self.runtime.container_status(container_id)
            path = resp.status.log_path
            self._paths.pop(container_id, None)
            if path:
                await asyncio.get_running_loop().run_in_executor(None, _remove_prefixed, path)

    # ------------------------------------------------------------ internals
    async def _learn_paths(self, ids: list[str]) -> None:
        if not ids:
            return
        sem = asyncio.Semaphore(STATUS_CONCURRENCY)

        async def one(cid: str) -> None:
            async with sem:
                try:
                    st = (await self.runtime.container_status(cid)).status
                except errors.CRIError as err:
                    log.error("Failed to get container status of %s: %s", cid, err)
                    return
                if st.log_path:
                    self._paths[cid] = st.log_path

        await asyncio.gather(*(one(cid) for cid in ids))

    async def _process(self, cid: str, path: str) -> bool:
        loop = asyncio.get_running_loop()
        size = await loop.run_in_executor(None, _size, path)
        if size is None:
            try:
                await self.runtime.reopen_container_log(cid)
            except errors.CRIError as err:
                log.error(
                    "Container %s log %s is missing and reopening it failed: %s", cid, path, err
                )
                return False
            size = await loop.run_in_executor(None, _size, path)
            if size is None:
                log.error("Container %s log %s is still missing after a reopen", cid, path)
                return False
        if size < self.policy.max_size:
            return False
        stamp = time.strftime(TIMESTAMP_FORMAT, time.localtime(self.clock()))
        rotated = f"{path}.{stamp}"
        try:
            if not await loop.run_in_executor(None, _prepare, path, self.policy.max_files, rotated):
                # Rotated already within this second: the same name again would make
                # the next round drop this file as a finished compression. Upstream
                # never gets here (its interval is at least 3 s); wait a round.
                log.debug("Log %s was rotated this second already; next round", path)
                return False
        except OSError as err:
            log.error("Failed to rotate log %s of container %s: %s", path, cid, err)
            return False
        try:
            await loop.run_in_executor(None, os.rename, path, rotated)
        except OSError as err:
            log.error("Failed to rotate log %s to %s: %s", path, rotated, err)
            return False
        try:
            await self.runtime.reopen_container_log(cid)
        except errors.CRIError as err:
            # Put it back so a later round rotates it again; were the kubelet to
            # die right here, the runtime would keep writing to the renamed file.
            try:
                await loop.run_in_executor(None, os.rename, rotated, path)
            except OSError as rerr:
                log.error("Failed to rename rotated log %s back to %s: %s", rotated, path, rerr)
            log.error("Failed to reopen container log of %s: %s", cid, err)
            return False
        return True


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _sizes(paths: list[str]) -> list[int | None]:
    out: list[int | None] = []
    for p in paths:
        try:
            out.append(os.stat(p).st_size)
        except FileNotFoundError:
            out.append(None)
        except OSError as err:
            log.error("Failed to stat container log %s: %s", p, err)
            out.append(-1)  # never due: below any max size
    return out


def _in_use(name: str, names: set[str]) -> bool:
    if name.endswith(TMP_SUFFIX):
        return False  # a compression that did not finish
    if name.endswith(COMPRESS_SUFFIX):
        return True
    return name + COMPRESS_SUFFIX not in names  # compressed, but not yet removed


def _prepare(path: str, max_files: int, target: str) -> bool:
    """Steps 1-3: clean up, trim to max_files - 2 rotated files, gzip them. False,
    touching nothing, when `target` (the name the live log is about to get) is taken."""
    if os.path.lexists(target) or os.path.lexists(target + COMPRESS_SUFFIX):
        return False
    rotated = glob.glob(glob.escape(path) + ".*")
    names = set(rotated)
    keep = []
    for r in rotated:
        if _in_use(r, names):
            keep.append(r)
        else:
            os.remove(r)
    keep.sort()  # the timestamp suffix sorts oldest first
    excess = len(keep) - max(0, max_files - 2)
    for r in keep[: max(0, excess)]:
        os.remove(r)
    for r in keep[max(0, excess) :]:
        if not r.endswith(COMPRESS_SUFFIX):
            _compress(r)
    return True


def _compress(path: str) -> None:
    tmp = path + TMP_SUFFIX
    try:
        mode = os.stat(path).st_mode & 0o777
        with open(path, "rb") as src, open(tmp, "wb") as raw:
            os.fchmod(raw.fileno(), mode)
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)
        os.rename(tmp, path + COMPRESS_SUFFIX)
    finally:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
    os.remove(path)


def _remove_prefixed(path: str) -> None:
    for p in glob.glob(glob.escape(path) + "*"):
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
