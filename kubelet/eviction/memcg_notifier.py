"""The kernel memcg threshold notifier (`kernelMemcgNotification`), as upstream's
memory threshold notifiers: the kernel wakes the eviction manager the moment a
memory cgroup's usage crosses the level where a memory threshold would be met,
instead of the next 10-second pass finding it.

cgroup v1 only (`cgroup.event_control`, an eventfd on `memory.usage_in_bytes`):
the node's threshold watches the memory hierarchy's root, the allocatable one
the kubepods cgroup. The kernel compares usage, which counts page cache, while
the signal is the working set; so the level is capacity - threshold + inactive
file, and is set again from each new observation (at most every 10 s), as
upstream does. A crossing in either direction wakes the manager, which then
runs a full pass: the notification decides when, never what.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kubelet.eviction import signals as sig
from kubelet.eviction.signals import Observation
from kubelet.eviction.thresholds import Threshold

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 10.0  # notifierRefreshInterval
USAGE_FILE = "memory.usage_in_bytes"
EVENT_CONTROL = "cgroup.event_control"


def memcg_level(t: Threshold, obs: Observation) -> int:
    """The memory.usage_in_bytes level at which `t` is met: the usage that
    leaves exactly the threshold available once inactive file is dropped."""
    return int(obs.capacity - t.limit(obs.capacity) + obs.reclaimable)


class CgroupNotifier:
    """One registration: an eventfd the kernel signals when `path`'s memory
    usage crosses `level`. Closing the eventfd ends the registration."""

    def __init__(self, path: str, level: int) -> None:
        self.path, self.level = path, level
        watch = os.open(os.path.join(path, USAGE_FILE), os.O_RDONLY | os.O_CLOEXEC)
        try:
            control = os.open(os.path.join(path, EVENT_CONTROL), os.O_WRONLY | os.O_CLOEXEC)
            try:
                self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
                try:
                    os.write(control, f"{self.fd} {watch} {level}".encode())
                except OSError:
                    os.close(self.fd)
                    raise
            finally:
                os.close(control)
        finally:
            os.close(watch)

    def drain(self) -> int:
        """How many crossings the kernel counted since the last drain."""
        try:
            return int.from_bytes(os.read(self.fd, 8), "little")
        except BlockingIOError:
            return 0

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class MemoryThresholdNotifier:
    """A memory threshold's notifier: registered again with each new level,
    waking `crossed` (on the event loop) at each crossing."""

    threshold: Threshold
    cgroup: str
    crossed: Callable[[str], None]
    current: CgroupNotifier | None = None

    @property
    def description(self) -> str:
        hard = "hard" if self.threshold.hard else "soft"
        allocatable = " allocatable" if self.threshold.signal == sig.ALLOCATABLE_MEMORY else ""
        return f"{hard}{allocatable} memory eviction threshold"

    def update(self, obs: Observation, loop: asyncio.AbstractEventLoop) -> None:
        level = memcg_level(self.threshold, obs)
        self.stop(loop)
        try:
            notifier = CgroupNotifier(self.cgroup, level)
        except OSError as err:
            log.info("eviction: the %s notifier on %s failed: %s", self.description,
                     self.cgroup, err)  # fmt: skip
            return
        log.debug("eviction: %s notifier at %d bytes of usage", self.description, level)
        loop.add_reader(notifier.fd, self._on_event, notifier)
        self.current = notifier

    def _on_event(self, notifier: CgroupNotifier) -> None:
        if notifier.drain():
            self.crossed(f"eviction manager: {self.description} crossed")

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.current is not None:
            loop.remove_reader(self.current.fd)
            self.current.close()
            self.current = None


class MemcgCgroups(NamedTuple):
    """Where the notifiers watch: the cgroup version, the hierarchy's root
    (/sys/fs/cgroup) and the kubepods cgroup (None: allocatable not enforced)."""

    cgroup_version: int
    hierarchy: str
    kubepods: str | None


def memory_notifiers(
    found: list[Threshold],
    cgroup_version: int,
    hierarchy: str,
    kubepods: str | None,
    crossed: Callable[[str], None],
) -> list[MemoryThresholdNotifier]:
    """One notifier per memory threshold (kernelMemcgNotification: true).
    cgroup v2 has no usage notifications: said once, and the 10 s pass stays."""
    memory = [t for t in found if t.signal in (sig.MEMORY, sig.ALLOCATABLE_MEMORY)]
    if not memory:
        return []
    if cgroup_version != 1:
        log.warning("kernelMemcgNotification: cgroup v2 has no memory usage notifications; "
                    "memory thresholds are checked every eviction pass (10 s)")  # fmt: skip
        return []
    out = []
    for t in memory:
        if t.signal == sig.ALLOCATABLE_MEMORY and kubepods is None:
            continue
        rel = "" if t.signal == sig.MEMORY else (kubepods or "").strip("/")
        path = os.path.join(hierarchy, "memory", rel) if rel else os.path.join(hierarchy, "memory")
        out.append(MemoryThresholdNotifier(t, path, crossed))
    return out
