"""sd_notify(3) without libsystemd: state lines to the service manager.

The manager's socket is $NOTIFY_SOCKET: a path, or an abstract-namespace name
written with a leading '@'. Sends never block the event loop (a full receive
queue is an error, not a wait). Without NOTIFY_SOCKET the kubelet is not run by
a notify-aware manager and nothing is sent.
"""

from __future__ import annotations

import os
import socket


class NotifyError(OSError):
    """NOTIFY_SOCKET is set but the state could not be delivered."""


def _address(value: str) -> str:
    if value.startswith("@"):
        return "\0" + value[1:]  # abstract namespace
    if value.startswith("/"):
        return value
    raise NotifyError(
        f"NOTIFY_SOCKET={value!r}: only unix socket paths and @abstract names are supported"
    )


def notify(state: str = "READY=1") -> bool:
    """Send state; False when NOTIFY_SOCKET is unset, NotifyError when delivery fails."""
    value = os.environ.get("NOTIFY_SOCKET")
    if not value:
        return False
    addr = _address(value)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(state.encode(), addr)
        except OSError as err:
            raise NotifyError(f"sd_notify {state!r} to {value}: {err}") from err
    return True


def watchdog_interval() -> float:
    """The manager's watchdog timeout in seconds (WatchdogSec=), or 0 when there is
    none for this process: WATCHDOG_USEC unset, or WATCHDOG_PID naming another
    process. ValueError when WATCHDOG_USEC is not a positive integer."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec:
        return 0.0
    try:
        n = int(usec)
    except ValueError:
        raise ValueError(f"WATCHDOG_USEC={usec!r} is not a number") from None
    if n <= 0:
        raise ValueError(f"WATCHDOG_USEC={usec!r} must be a positive number")
    pid = os.environ.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return 0.0
        except ValueError:
            raise ValueError(f"WATCHDOG_PID={pid!r} is not a number") from None
    return n / 1e6
