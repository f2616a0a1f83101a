"""A private containerd for tests and demos, started by hand (no systemd).

Everything lives under one directory: root, state, socket, CNI config and IP
leases. The settings these machines need: restrict_oom_score_adj (no
CAP_SYS_RESOURCE, so negative scores fail), cgroupfs rather than systemd, and
a bridge + host-local CNI network. Images come from local OCI tarballs
(kubelet.testing.images). Only the processes this harness started are stopped.

    python -m kubelet.testing.containerd up --dir /tmp/ctd    # Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubelet.testing import images
from kubelet.testing.process import unmount_under

CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")


class Unavailable(Exception):
    """containerd cannot run here; the message says why."""


def _which(name: str) -> str:
    path = shutil.which(name) or (
        f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None
    )
    if not path:
        raise Unavailable(
            f"{name} not installed (apt-get install containerd runc containernetworking-plugins)"
        )
    return path


@dataclass
class Containerd:
    directory: str
    subnet: str = "10.244.7.0/24"
    bridge: str = "kpy0"  # one bridge and subnet per harness that may run at once
    proc: subprocess.Popen[bytes] | None = None
    socket: str = ""
    imported: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def config(self) -> str:
        d = self.directory
        cni_bin = next((p for p in CNI_BIN_DIRS if os.path.exists(os.path.join(p, "bridge"))), None)
        if cni_bin is None:
            raise Unavailable(
                "CNI plugins not installed (apt-get install containernetworking-plugins)"
            )
        os.makedirs(f"{d}/cni/conf", exist_ok=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "kubelet-py",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.subnet}]],
                        "dataDir": f"{d}/cni/ipam",
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        with open(f"{d}/cni/conf/10-kubelet-py.conflist", "w") as fh:
            json.dump(conflist, fh, indent=2)
        return f"""version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_REF}"
  # These VMs lack CAP_SYS_RESOURCE: negative oom_score_adj values would fail.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{d}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"""

    def start(self, timeout: float = 30.0) -> Containerd:
        if os.geteuid() != 0:
            raise Unavailable("containerd needs root")
        binary = _which("containerd")
        _which("runc")
        os.makedirs(self.directory, exist_ok=True)
        # unix socket paths are short: keep it near the top of the directory
        self.socket = os.path.join(self.directory, "ctd.sock")
        cfg_path = os.path.join(self.directory, "config.toml")
        with open(cfg_path, "w") as fh:
            fh.write(self.config())
        log = open(os.path.join(self.directory, "containerd.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "--config", cfg_path], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(
                    f"containerd exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if os.path.exists(self.socket) and self.ctr("version", check=False).returncode == 0:
                break
            time.sleep(0.2)
        else:
            self.stop()
            raise Unavailable(f"containerd did not come up in {timeout}s: {self.log_tail()}")
        try:
            self.import_images()
        except Exception as err:
            self.stop()
            raise Unavailable(f"could not import test images: {err}") from err
        return self

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(os.path.join(self.directory, "containerd.log"), "rb") as fh:
                return fh.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_which("ctr"), "--address", self.socket, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def import_images(self) -> None:
        for ref, path in images.build_all(os.path.join(self.directory, "images")).items():
            self.ctr("images", "import", "--all-platforms", path)
            self.imported.append(ref)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._remove_all_pods()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._kill_our_shims()
        self._unmount_all()

    def _remove_all_pods(self) -> None:
        # Kill what the shims run, so containerd can stop promptly.
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)

    def shim_pids(self) -> list[int]:
        """The shims serving this containerd: their command line names its socket."""
        sock = self.socket.encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmd = fh.read().split(b"\0")
            except OSError:
                continue
            if cmd and b"containerd-shim" in cmd[0] and sock in cmd:
                pids.append(int(entry))
        return pids

    def _kill_our_shims(self) -> None:
        # Shims outlive containerd by design.
        for pid in self.shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _unmount_all(self) -> None:
        unmount_under(Path(self.directory))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubelet.testing.containerd")
    ap.add_argument("command", choices=["up"])
    ap.add_argument("--dir", default="/tmp/kubelet-py-containerd")
    args = ap.parse_args(argv)
    # Block the stop signals so sigwait() receives them and the cleanup runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        # Its own bridge and subnet, so it can run beside the test suite's.
        c = Containerd(args.dir, subnet="10.244.8.0/24", bridge="kpy1").start()
    except Unavailable as err:
        print(f"containerd unavailable: {err}", file=sys.stderr)
        return 1
    print(f"containerd ready: {c.endpoint} (images: {', '.join(c.imported)})")
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})  # blocked above, so this returns
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
