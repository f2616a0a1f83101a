"""A private containerd for tests and demos, started by hand (no systemd).

Everything lives under one directory: root, state, socket, CNI config and IP
leases. The settings these machines need: restrict_oom_score_adj (no
CAP_SYS_RESOURCE, so negative scores fail), cgroupfs rather than systemd, and
a bridge + host-local CNI network. Images come from local OCI tarballs
(kubelet.testing.images). Only the processes this harness started are stopped.

Two runtimes, chosen by KPY_CONTAINERD:
- `2` (the default): containerd v2 and runc built from their Go modules by
  hack/parts/containerd2.sh into $KUBELET_CACHE, configured in containerd 2's
  config format (version 3);
- `1.6`: Debian's containerd 1.6 and runc (hack/parts/containerd.sh), in the
  version 2 format, kept for comparison.

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
from kubelet.testing.process import remove_unless_mounted, unmount_under

CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
# Kept in step with hack/parts/containerd2.sh (tests/unit/core/test_containerd_parts.py).
CONTAINERD2_VERSION = "v2.4.2"
RUNC_VERSION = "v1.5.2"
FLAVORS = ("2", "1.6")


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


def default_flavor() -> str:
    """KPY_CONTAINERD, or "2"; anything else is an error, not a silent default."""
    flavor = os.environ.get("KPY_CONTAINERD", "2")
    if flavor not in FLAVORS:
        raise ValueError(f"KPY_CONTAINERD={flavor!r}: want one of {', '.join(FLAVORS)}")
    return flavor


@dataclass(frozen=True)
class Parts:
    """The binaries of one flavor."""

    flavor: str
    containerd: str
    shim: str  # containerd-shim-runc-v2
    ctr: str
    runc: str


def cache_dir() -> str:
    return os.environ.get("KUBELET_CACHE") or os.path.expanduser("~/.cache/kubelet-py")


def parts(flavor: str | None = None) -> Parts:
    """The binaries of `flavor` (default: KPY_CONTAINERD); Unavailable names
    what is missing and the script that provides it."""
    flavor = flavor or default_flavor()
    if flavor == "1.6":
        return Parts(
            flavor,
            _which("containerd"),
            _which("containerd-shim-runc-v2"),
            _which("ctr"),
            _which("runc"),
        )
    bin_dir = os.path.join(cache_dir(), f"containerd-{CONTAINERD2_VERSION}", "bin")
    p = Parts(
        flavor,
        os.path.join(bin_dir, "containerd"),
        os.path.join(bin_dir, "containerd-shim-runc-v2"),
        os.path.join(bin_dir, "ctr"),
        os.path.join(cache_dir(), f"runc-{RUNC_VERSION}", "runc"),
    )
    missing = [b for b in (p.containerd, p.shim, p.ctr, p.runc) if not os.access(b, os.X_OK)]
    if missing:
        raise Unavailable(
            f"containerd {CONTAINERD2_VERSION} / runc {RUNC_VERSION} not built ({', '.join(missing)}"
            " missing): run hack/parts/containerd2.sh, or KPY_CONTAINERD=1.6 for Debian's"
        )
    return p


@dataclass
class Containerd:
    directory: str
    subnet: str = "10.244.7.0/24"
    bridge: str = "kpy0"  # one bridge and subnet per harness that may run at once
    proc: subprocess.Popen[bytes] | None = None
    socket: str = ""
    imported: list[str] = field(default_factory=list)
    flavor: str = field(default_factory=default_flavor)
    bins: Parts | None = None  # found by start()

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def _cni(self) -> str:
        """Writes the CNI network config; returns the plugins' directory."""
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
        return cni_bin

    def config(self) -> str:
        bins = self.bins or parts(self.flavor)
        if self.flavor == "1.6":
            return self._config_v2(self._cni())
        return self._config_v3(self._cni(), bins)

    def _config_v2(self, cni_bin: str) -> str:
        """containerd 1.6: config version 2, the CRI plugin's options in one table."""
        d = self.directory
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

    def _config_v3(self, cni_bin: str, bins: Parts) -> str:
        """containerd 2: config version 3, where the CRI plugin is split into
        io.containerd.cri.v1.images (snapshotter, pinned sandbox image,
        registries) and io.containerd.cri.v1.runtime (runtimes, CNI, OOM
        score). The shim and runc are the ones built with this containerd."""
        d = self.directory
        return f"""version = 3
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{images.PAUSE_REF}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{d}/certs.d'

  [plugins.'io.containerd.cri.v1.runtime']
    # These VMs lack CAP_SYS_RESOURCE: negative oom_score_adj values would fail.
    restrict_oom_score_adj = true
    enable_selinux = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        runtime_path = '{bins.shim}'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{bins.runc}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{cni_bin}']
      conf_dir = '{d}/cni/conf'

  # NRI's socket is one per machine (/var/run/nri/nri.sock): several private
  # containerds would take it from each other. Nothing here uses NRI.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
"""

    def start(self, timeout: float = 30.0) -> Containerd:
        if os.geteuid() != 0:
            raise Unavailable("containerd needs root")
        self.bins = parts(self.flavor)
        os.makedirs(self.directory, exist_ok=True)
        # unix socket paths are short: keep it near the top of the directory
        self.socket = os.path.join(self.directory, "ctd.sock")
        cfg_path = os.path.join(self.directory, "config.toml")
        with open(cfg_path, "w") as fh:
            fh.write(self.config())
        log = open(os.path.join(self.directory, "containerd.log"), "ab")
        # The shim is found on PATH (1.6 has no runtime_path): this flavor's first.
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(self.bins.shim) + os.pathsep + env.get("PATH", "")
        self.proc = subprocess.Popen(
            [self.bins.containerd, "--config", cfg_path],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
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
        except Exception as err:  # whatever failed, containerd must not outlive the harness
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
            [
                (self.bins or parts(self.flavor)).ctr,
                "--address",
                self.socket,
                "-n",
                "k8s.io",
                *args,
            ],
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

    def remove_root(self) -> bool:
        """After stop(), for good: the content store and snapshots (hundreds of
        MB a run) go; the config and log stay. Not while anything is still
        mounted under the directory (a tree walk must not reach into a mount):
        False then, and nothing is removed."""
        return remove_unless_mounted(Path(self.directory, "root"), Path(self.directory))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubelet.testing.containerd")
    ap.add_argument("command", choices=["up"])
    ap.add_argument("--dir", default="/tmp/kubelet-py-containerd")
    ap.add_argument(
        "--containerd", choices=FLAVORS, default=None, help="default: KPY_CONTAINERD, else 2"
    )
    args = ap.parse_args(argv)
    # Block the stop signals so sigwait() receives them and the cleanup runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        # Its own bridge and subnet, so it can run beside the test suite's.
        c = Containerd(
            args.dir,
            subnet="10.244.8.0/24",
            bridge="kpy1",
            flavor=args.containerd or default_flavor(),
        ).start()
    except Unavailable as err:
        print(f"containerd unavailable: {err}", file=sys.stderr)
        return 1
    print(f"containerd {c.flavor} ready: {c.endpoint} (images: {', '.join(c.imported)})")
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})  # blocked above, so this returns
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
