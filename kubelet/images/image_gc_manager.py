"""Image garbage collection (pkg/kubelet/images/image_gc_manager.go upstream).

Each pass lists the images and the containers once (ListImages, ListContainers)
and keeps a record per image ID: when it was first detected and when it was last
seen in use by a container (running or not). An image is never a candidate
while a container uses it, while the runtime reports it pinned, or when it is
the sandbox (pause) image. Candidates go least recently used first (never used
before used; ties broken by first detection).

* With ``max_age`` set, and once the kubelet has run GC for longer than it,
  candidates unused for longer than ``max_age`` are removed whatever the disk.
* When the image filesystem is at ``high_threshold_percent`` or more, candidates
  detected at least ``min_age`` ago are removed until usage is down to
  ``low_threshold_percent``; falling short is a FreeDiskSpaceFailed Warning on
  the Node.

Usage comes from CRI ImageFsInfo: the runtime names the filesystem holding its
images, and capacity and available bytes are those of that mountpoint's
filesystem (statvfs), as cAdvisor reports them upstream.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService

if TYPE_CHECKING:
    from kubelet.apis.config import KubeletConfiguration

log = logging.getLogger(__name__)

IMAGE_GC_PERIOD = 300.0  # ImageGCPeriod upstream

# (etype, reason, message) about the Node; the Kubelet binds it to its node ref.
NodeEvent = Callable[[str, str, str], None]

_NEVER = -math.inf  # lastUsed of an image no container was seen using


@dataclass(frozen=True)
class ImageGCPolicy:
    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: float = 120.0  # seconds since first detected
    max_age: float = 0.0  # seconds since last used; 0: off

    def __post_init__(self) -> None:
        # The checks and messages of NewImageGCManager.
        if not 0 <= self.high_threshold_percent <= 100:
            raise ValueError(
                f"invalid HighThresholdPercent {self.high_threshold_percent}, must be in range [0-100]"
            )
        if not 0 <= self.low_threshold_percent <= 100:
            raise ValueError(
                f"invalid LowThresholdPercent {self.low_threshold_percent}, must be in range [0-100]"
            )
        if self.low_threshold_percent > self.high_threshold_percent:
            raise ValueError(
                f"LowThresholdPercent {self.low_threshold_percent} can not be higher than "
                f"HighThresholdPercent {self.high_threshold_percent}"
            )

    @property
    def enabled(self) -> bool:
        """Upstream starts no image GC at all with a 100% high threshold and no max age."""
        return self.high_threshold_percent < 100 or self.max_age > 0


@dataclass(frozen=True)
class FsUsage:
    capacity: int
    available: int


def statvfs_usage(path: str) -> FsUsage:
    st = os.statvfs(path)
    return FsUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


@dataclass(slots=True)
class _Record:
    first_detected: float
    last_used: float = _NEVER
    size: int = 0
    pinned: bool = False
    protected: bool = False  # the sandbox image


@dataclass
class ImageGCResult:
    removed: list[str] = field(default_factory=list)  # image IDs
    freed: int = 0  # bytes, by the sizes the runtime reports


class ImageGCError(Exception):
    pass


class ImageGCManager:
    def __init__(
        self,
        images: ImageService,
        runtime: RuntimeService,
        policy: ImageGCPolicy | None = None,
        *,
        sandbox_image: str = "",
        node_event: NodeEvent | None = None,
        fs_usage: Callable[[str], FsUsage] = statvfs_usage,
        clock: Callable[[], float] = time.monotonic,
        period: float = IMAGE_GC_PERIOD,
    ) -> None:
        """`sandbox_image` is --pod-infra-container-image (or the runtime's
        sandbox image) when known: it is never removed, pinned or not.
        `fs_usage(mountpoint)` reads capacity and available bytes (statvfs)."""
        self.images = images
        self.runtime = runtime
        self.policy = policy or ImageGCPolicy()
        self.sandbox_refs = _ref_forms(sandbox_image) if sandbox_image else frozenset()
        self.node_event = node_event
        self.fs_usage = fs_usage
        self.clock = clock
        self.period = period
        self.began = clock()  # beganGC: max_age waits for this much uptime first
        self.records: dict[str, _Record] = {}
        self._lock = asyncio.Lock()  # one pass at a time over the records

    @classmethod
    def from_config(
        cls,
        config: KubeletConfiguration,
        images: ImageService,
        runtime: RuntimeService,
        **kw: Any,
    ) -> ImageGCManager:
        """imageGCHighThresholdPercent, imageGCLowThresholdPercent, imageMinimumGCAge and
        imageMaximumGCAge; `kw` as for the constructor."""
        policy = ImageGCPolicy(
            high_threshold_percent=config.image_gc_high_threshold_percent,
            low_threshold_percent=config.image_gc_low_threshold_percent,
            min_age=config.image_minimum_gc_age,
            max_age=config.image_maximum_gc_age,
        )
        return cls(images, runtime, policy, **kw)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then every period until `stop` is set. As upstream, only a
        failure that repeats is an ImageGCFailed Warning event on the Node (the
        first may be stats that are not ready yet)."""
        if not self.policy.enabled:
            log.info("ImageGCHighThresholdPercent is 100 and ImageMaximumGCAge is 0: image GC off")
            await stop.wait()
            return
        failed_before = False
        while not stop.is_set():
            try:
                await self.garbage_collect()
            except Exception as err:  # told (event when repeated); the next period retries
                if failed_before:
                    log.error("Image garbage collection failed multiple times in a row: %s", err)
                    self._event("ImageGCFailed", str(err))
                else:
                    log.error("Image garbage collection failed once: %s", err)
                failed_before = True
            else:
                failed_before = False
            try:
                await asyncio.wait_for(stop.wait(), self.period)
            except TimeoutError:
                pass

    async def garbage_collect(self) -> ImageGCResult:
        """One pass; raises ImageGCError (after its event) when it could not free
        what it had to."""
        async with self._lock:
            result = ImageGCResult()
            free_time = self.clock()
            candidates = await self._candidates(free_time)
            candidates = await self._free_old_images(candidates, free_time, result)
            usage = await self._image_fs_usage()
            capacity, available = usage.capacity, min(usage.available, usage.capacity)
            if capacity <= 0:
                msg = "invalid capacity 0 on image filesystem"
                self._event("InvalidDiskCapacity", msg)
                raise ImageGCError(msg)
            percent = 100 - available * 100 // capacity
            if percent >= self.policy.high_threshold_percent:
                to_free = capacity * (100 - self.policy.low_threshold_percent) // 100 - available
                log.info(
                    "Image fs usage %d%% is at or over the high threshold %d%%: freeing %d bytes "
                    "to reach %d%%",
                    percent,
                    self.policy.high_threshold_percent,
                    to_free,
                    self.policy.low_threshold_percent,
                )
                await self._free_space(to_free, free_time, candidates, result)
                if result.freed < to_free:
                    msg = (
                        "Failed to garbage collect required amount of images. Attempted to free "
                        f"{to_free} bytes, but only found {result.freed} bytes eligible to free."
                    )
                    self._event("FreeDiskSpaceFailed", msg)
                    raise ImageGCError(msg)
            return result

    async def delete_unused_images(self) -> ImageGCResult:
        """Every unused image old enough (DeleteUnusedImages, for the eviction manager)."""
        async with self._lock:
            result = ImageGCResult()
            free_time = self.clock()
            candidates = await self._candidates(free_time)
            await self._free_space(math.inf, free_time, candidates, result)
            return result

    # ---------------------------------------------------------------- records
    async def _candidates(self, now: float) -> list[tuple[str, _Record]]:
        """Update the records (detectImages) and return the removable images in
        eviction order (imagesInEvictionOrder)."""
        images = await self.images.list_images()
        containers = await self.runtime.list_containers()
        # image_ref is the image ID on containerd, a digest elsewhere, the tag on
        # some fakes: it is matched against every name an image has. image_id
        # (CRI 1.30+) only when image_ref is empty: one string read per container.
        in_use = {c.image_ref or c.image_id for c in containers}
        in_use.discard("")
        records = self.records
        present: set[str] = set()
        used_ids: set[str] = set()
        sandbox = self.sandbox_refs
        for img in images:
            iid = img.id
            present.add(iid)
            rec = records.get(iid)
            if rec is None:
                rec = records[iid] = _Record(first_detected=now)
            if (
                iid in in_use
                or not in_use.isdisjoint(img.repo_digests)
                or not in_use.isdisjoint(img.repo_tags)
            ):
                rec.last_used = now
                used_ids.add(iid)
            rec.size = img.size
            rec.pinned = img.pinned
            rec.protected = bool(sandbox) and (
                iid in sandbox
                or not sandbox.isdisjoint(img.repo_tags)
                or not sandbox.isdisjoint(img.repo_digests)
            )
        for iid in [i for i in records if i not in present]:
            del records[iid]
        out = [
            (iid, rec)
            for iid, rec in records.items()
            if iid not in used_ids and not rec.pinned and not rec.protected
        ]
        out.sort(key=lambda e: (e[1].last_used, e[1].first_detected))
        return out

    async def _free_old_images(
        self, candidates: list[tuple[str, _Record]], now: float, result: ImageGCResult
    ) -> list[tuple[str, _Record]]:
        max_age = self.policy.max_age
        # Before the kubelet has watched for max_age, "unused" is not known yet.
        if max_age <= 0 or now - self.began <= max_age:
            return candidates
        remaining = []
        problems = []
        for iid, rec in candidates:
            if now - rec.last_used > max_age:
                try:
                    await self._remove(iid, rec, result)
                    continue
                except errors.CRIError as err:
                    problems.append(str(err))
            remaining.append((iid, rec))
        if problems:
            raise ImageGCError(
                f"wanted to free images older than {_go_duration(max_age)}, encountered errors "
                f"in image deletion: {_aggregate(problems)}"
            )
        return remaining

    async def _free_space(
        self,
        to_free: float,
        now: float,
        candidates: list[tuple[str, _Record]],
        result: ImageGCResult,
    ) -> None:
        start = result.freed
        problems = []
        for iid, rec in candidates:
            if rec.last_used >= now:
                continue  # seen in use during this very pass
            if now - rec.first_detected < self.policy.min_age:
                continue  # maybe just pulled for a container about to start
            try:
                await self._remove(iid, rec, result)
            except errors.CRIError as err:
                problems.append(str(err))
                continue
            if result.freed - start >= to_free:
                break
        if problems:
            raise ImageGCError(
                f"wanted to free {to_free} bytes, but freed {result.freed - start} bytes space "
                f"with errors in image deletion: {_aggregate(problems)}"
            )

    async def _remove(self, iid: str, rec: _Record, result: ImageGCResult) -> None:
        log.info("Removing image %s to free %d bytes", iid, rec.size)
        try:
            await self.images.remove_image(pb.ImageSpec(image=iid))
        except errors.NotFoundError:
            pass  # gone already: the space is free all the same
        self.records.pop(iid, None)
        result.removed.append(iid)
        result.freed += rec.size

    async def _image_fs_usage(self) -> FsUsage:
        info = await self.images.image_fs_info()
        if not info.image_filesystems:
            raise ImageGCError("imageFs information is unavailable")
        mountpoint = info.image_filesystems[0].fs_id.mountpoint
        if not mountpoint:
            return FsUsage(0, 0)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, self.fs_usage, mountpoint)
        except OSError as err:
            log.warning("Cannot stat the image filesystem at %s: %s", mountpoint, err)
            return FsUsage(0, 0)

    def _event(self, reason: str, message: str) -> None:
        if self.node_event is not None:
            self.node_event("Warning", reason, message)


def _ref_forms(ref: str) -> frozenset[str]:
    """The ways a runtime may spell an image reference in repo_tags/repo_digests:
    as given and fully qualified (``pause:3.10`` is ``docker.io/library/pause:3.10``)."""
    forms = {ref}
    name, sep, digest = ref.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = ("docker.io/library/" if "/" not in name else "docker.io/") + name
    if not sep and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    forms.add(name + sep + digest)
    return frozenset(forms)


def _aggregate(problems: list[str]) -> str:
    # errors.NewAggregate's text: one error as is, several in brackets.
    return problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"


def _go_duration(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{s}s"
    return f"{m}m{s}s" if m else f"{s}s"
