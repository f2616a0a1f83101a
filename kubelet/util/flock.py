"""The kubelet's lock file (--lock-file, --exit-on-lock-contention)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Callable

from kubelet.util.inotify import IN_DELETE_SELF, IN_OPEN, Inotify

log = logging.getLogger(__name__)


def acquire(path: str) -> int:
    """Take an exclusive flock on path, waiting while another process holds it.

    The descriptor stays open for the life of the process (the lock goes with it).
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def watch_for_contention(
    path: str, loop: asyncio.AbstractEventLoop, on_contention: Callable[[], None]
) -> Inotify:
    """Call on_contention when another process opens the lock file (to ask for the lock).

    Must be set up after acquire(): our own open is then in the past.
    """
    ino = Inotify()
    ino.add_watch(path, IN_OPEN | IN_DELETE_SELF)

    def readable() -> None:
        events = ino.read_events()
        if events:
            log.info("Lock file %s contended (inotify mask %#x); exiting", path, events[0][1])
            loop.remove_reader(ino.fileno())
            on_contention()

    loop.add_reader(ino.fileno(), readable)
    return ino
