"""systemd readiness notification (sd_notify READY=1) without libsystemd."""

from __future__ import annotations

import os
import socket


def notify(state: str = "READY=1") -> bool:
    """Send state to $NOTIFY_SOCKET; False when not run under a notify-aware manager."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]  # abstract namespace socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(addr)
        sock.sendall(state.encode())
    return True
