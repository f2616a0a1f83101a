"""How long a node took to come up (upstream's node_startup_latency_tracker.go):
boot to the kubelet's start, the kubelet's start to its first registration
attempt, that attempt to the Node being created, and creation to the first
status patch that left the Node Ready. Set once, only for a Node this kubelet
created (one adopted after a restart is not timed), as upstream's gauges."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from kubelet import metrics

log = logging.getLogger(__name__)


def boot_time(stat: str = "/proc/stat") -> float | None:
    """Wall time of the boot (btime in /proc/stat), None where unreadable."""
    try:
        with open(stat) as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError) as err:
        log.info("Boot time unknown, node start-up before the kubelet is not timed: %s", err)
    return None


def process_start_time(boot: float | None, stat: str = "/proc/self/stat") -> float | None:
    """Wall time this process started: its start in clock ticks after boot
    (field 22 of /proc/self/stat, after the parenthesised command name)."""
    if boot is None:
        return None
    try:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class NodeStartupLatencyTracker:
    def __init__(
        self,
        boot: float | None,
        kubelet_start: float,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.boot = boot
        self.kubelet_start = kubelet_start
        self.now = now
        self.first_attempt: float | None = None
        self.registered_new: float | None = None
        self.ready: float | None = None

    @classmethod
    def from_host(cls) -> NodeStartupLatencyTracker:
        boot = boot_time()
        return cls(boot, process_start_time(boot) or time.time())

    def attempt_register(self) -> None:
        """Called on every registration; only the first attempt counts."""
        if self.first_attempt is None:
            self.first_attempt = self.now()

    def registered_new_node(self) -> None:
        """This kubelet created its Node (not adopted an existing one)."""
        if self.first_attempt is None or self.registered_new is not None:
            return
        self.registered_new = self.now()
        if self.boot is not None:
            metrics.NODE_STARTUP_PRE_KUBELET.set(self.kubelet_start - self.boot)
        metrics.NODE_STARTUP_PRE_REGISTRATION.set(self.first_attempt - self.kubelet_start)
        metrics.NODE_STARTUP_REGISTRATION.set(self.registered_new - self.first_attempt)

    def node_ready(self) -> None:
        """A status patch came back with the Node Ready."""
        if self.registered_new is None or self.ready is not None:
            return
        self.ready = self.now()
        metrics.NODE_STARTUP_POST_REGISTRATION.set(self.ready - self.registered_new)
        if self.boot is not None:
            metrics.NODE_STARTUP.set(self.ready - self.boot)
