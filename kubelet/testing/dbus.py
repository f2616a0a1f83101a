"""A private D-Bus system bus: Debian's dbus-daemon with a system-bus
configuration listening on a socket in a directory of the test's own. A
process finds it through DBUS_SYSTEM_BUS_ADDRESS, as sd-bus and godbus do."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from kubelet.testing.helpers import stop_process

SOCKET = "system_bus_socket"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <!-- As the system bus: names owned by root only; signals free for all. -->
    <deny own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
  <policy user="root">
    <allow own="*"/>
  </policy>
  <limit name="max_incoming_unix_fds">64</limit>
</busconfig>
"""


class Unavailable(Exception):
    """dbus-daemon cannot run here; the message says why."""


@dataclass
class SystemBus:
    directory: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> str:
        return os.path.join(self.directory, SOCKET)

    @property
    def address(self) -> str:
        return f"unix:path={self.socket}"

    def env(self) -> dict[str, str]:
        """The environment of a process that should use this bus as its system bus."""
        return {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": self.address}

    def start(self) -> SystemBus:
        binary = shutil.which("dbus-daemon")
        if binary is None:
            raise Unavailable("dbus-daemon not installed (apt-get install dbus-daemon)")
        os.makedirs(self.directory, exist_ok=True)
        conf = os.path.join(self.directory, "system.conf")
        with open(conf, "w") as fh:
            fh.write(_CONFIG.format(socket=self.socket))
        log = open(os.path.join(self.directory, "dbus-daemon.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, f"--config-file={conf}", "--nofork", "--nopidfile", "--nosyslog"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if os.path.exists(self.socket):
                return self
            if self.proc.poll() is not None:
                raise Unavailable(f"dbus-daemon exited {self.proc.returncode}")
            time.sleep(0.05)
        self.stop()
        raise Unavailable("dbus-daemon did not create its socket")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
