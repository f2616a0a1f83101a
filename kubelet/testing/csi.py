"""The CSI test parts (hack/parts/csi.sh builds them into
~/.cache/kubelet-py/csi-parts/bin): the project's hostpath-style driver and
registrar, run here as host processes for tests of the kubelet's CSI code
without a cluster. In a cluster they run as pods (kubelet.testing.csi_deploy).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from kubelet.testing.process import unmount_under

DRIVER_NAME = "hostpath.csi.kubeletpy.local"
TOPOLOGY_KEY = "topology.hostpath.csi.kubeletpy.local/node"


class Unavailable(Exception):
    """A CSI part is not built (the message says how to build it)."""


def bin_dir() -> str:
    base = os.environ.get("KUBELET_CACHE", os.path.expanduser("~/.cache/kubelet-py"))
    return os.path.join(base, "csi-parts", "bin")


# The project's own CSI parts, rebuilt by hack/parts/csi.sh when their source changes.
OURS = ("csi-hostpath", "csi-registrar", "csi-resizer", "hostpathplugin")
OURS_SRC = os.path.join(os.path.dirname(__file__), "..", "..", "hack", "parts", "csi")


def source_stamp(src: str = OURS_SRC) -> str | None:
    """The stamp csi.sh writes for the sources it built from (`sha256sum` of
    each .go, go.mod and go.sum file, by path, hashed again); None without
    the sources (an installed package)."""
    if not os.path.isdir(src):
        return None
    files = sorted(
        "./" + os.path.relpath(os.path.join(d, f), src)
        for d, _, names in os.walk(src)
        for f in names
        if f.endswith(".go") or f in ("go.mod", "go.sum")
    )
    lines = []
    for rel in files:
        with open(os.path.join(src, rel), "rb") as fh:
            lines.append(f"{hashlib.sha256(fh.read()).hexdigest()}  {rel}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def binary(name: str) -> str:
    path = os.path.join(bin_dir(), name)
    if not os.access(path, os.X_OK):
        raise Unavailable(f"{path} missing: run hack/parts/csi.sh")
    if name in OURS:
        # A driver built from older sources fails tests for reasons that are not
        # the kubelet's: refuse it as csi.sh would rebuild it.
        want = source_stamp()
        try:
            with open(os.path.join(bin_dir(), ".ours.stamp")) as fh:
                have = fh.read().strip()
        except FileNotFoundError:
            have = ""
        if want is not None and have != want:
            raise Unavailable(f"{path} was built from other sources: run hack/parts/csi.sh")
    return path


def _wait_socket(path: str, proc: subprocess.Popen[bytes], log: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            with open(log, errors="replace") as fh:
                raise Unavailable(f"{os.path.basename(path)}'s server exited: {fh.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise Unavailable(f"{path} did not appear in {timeout:.0f}s")
        time.sleep(0.05)


class _Process:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _spawn(self, argv: list[str], log: str) -> None:
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """Gone at once, as a crashed driver (its socket stays behind)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self.proc = None


class HostpathDriver(_Process):
    """csi-hostpath on a socket in `directory`, its volumes in directory/state."""

    def __init__(
        self,
        directory: str,
        node_id: str,
        name: str = DRIVER_NAME,
        attach_required: bool = False,
        max_volumes: int = 0,
    ) -> None:
        super().__init__()
        self.directory = directory
        self.node_id = node_id
        self.name = name
        self.attach_required = attach_required
        self.max_volumes = max_volumes
        self.socket = os.path.join(directory, "csi.sock")
        self.state = os.path.join(directory, "state")
        self.log = os.path.join(directory, "driver.log")

    def start(self, timeout: float = 30.0) -> HostpathDriver:
        os.makedirs(self.directory, exist_ok=True)
        argv = [
            binary("csi-hostpath"),
            f"--endpoint=unix://{self.socket}",
            f"--drivername={self.name}",
            f"--nodeid={self.node_id}",
            f"--statedir={self.state}",
            f"--max-volumes-per-node={self.max_volumes}",
            f"--attach-required={'true' if self.attach_required else 'false'}",
            f"--topology-key={TOPOLOGY_KEY}",
        ]
        self._spawn(argv, self.log)
        assert self.proc is not None
        _wait_socket(self.socket, self.proc, self.log, timeout)
        return self

    def create_volume(self, name: str, size: int = 1 << 30, block: bool = False) -> str:
        """A provisioned volume, as CreateVolume makes it; returns its ID. A
        block volume is a file, attached to a loop device while staged."""
        r = subprocess.run(
            [binary("csi-hostpath"), f"--statedir={self.state}", f"--create-volume={name}",
             f"--size={size}", f"--block={'true' if block else 'false'}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip()

    def data_dir(self, volume_id: str) -> str:
        return os.path.join(self.state, "volumes", volume_id)

    def calls(self, method: str) -> int:
        """How many calls of a CSI method succeeded (from the driver's log)."""
        with open(self.log, errors="replace") as fh:
            return sum(1 for line in fh if line.rstrip().endswith(f"/{method} ok"))


class Registrar(_Process):
    """csi-registrar: registers the driver through the kubelet's registry dir."""

    def __init__(self, directory: str, csi_socket: str, registry_dir: str) -> None:
        super().__init__()
        self.csi_socket = csi_socket
        self.registry_dir = registry_dir
        self.log = os.path.join(directory, "registrar.log")

    def start(self) -> Registrar:
        argv = [
            binary("csi-registrar"),
            f"--csi-address={self.csi_socket}",
            f"--kubelet-registration-path={self.csi_socket}",
            f"--plugin-registration-path={self.registry_dir}",
        ]
        self._spawn(argv, self.log)
        return self


def loop_devices_under(directory: str) -> list[str]:
    """The loop devices (/dev/loopN) backed by a file at or under `directory`."""
    top = os.path.realpath(directory).rstrip("/")
    out = []
    for sysdir in sorted(glob.glob("/sys/block/loop*")):
        try:
            with open(os.path.join(sysdir, "loop", "backing_file")) as fh:
                backing = fh.read().strip()
        except OSError:
            continue  # not bound
        if backing.startswith(top + "/"):
            out.append("/dev/" + os.path.basename(sysdir))
    return out


def unmount_all_under(directory: str) -> None:
    """Lazily unmount whatever a test left mounted at or under `directory`
    (deepest first), then detach the loop devices backed by files there."""
    unmount_under(Path(directory))
    detach_loops_under(directory)


def detach_loops_under(directory: str) -> None:
    """Detach the loop devices a driver left attached to files under `directory`."""
    for dev in loop_devices_under(directory):
        subprocess.run(["losetup", "-d", dev], capture_output=True, check=False)
