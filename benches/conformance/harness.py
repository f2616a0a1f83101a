"""One conformance run: build what is missing, start a one-node cluster (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, a private containerd
with runc and bridge CNI, the kubelet under test), run the e2e binary under
ginkgo, and read its JUnit report.

Each kubelet gets a fresh control plane and a fresh containerd (same
configuration, same images), so nothing one run leaves behind reaches the next.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches.conformance.results import RunResult, TestResult, parse_junit
from kubelet.testing import images
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane, Unavailable
from kubelet.testing.kubelets import KUBELET_COMMAND, KubeletProcess, cluster_auth
from kubelet.testing.process import remove_log_links_into, stop_process, unmount_under

REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.34.4")
CACHE = Path(os.environ.get("KUBELET_CACHE", Path.home() / ".cache/kubelet-py"))
BIN = CACHE / f"k8s-{K8S_VERSION}" / "bin"
SRC = CACHE / f"k8s-{K8S_VERSION}" / "src"
# Everything a run needs from hack/build-control-plane.sh; the upstream kubelet
# only when it is the one under test.
TARGETS = [
    "kube-apiserver",
    "kubectl",
    "kube-controller-manager",
    "kube-scheduler",
    "agnhost",
    "nnp",
    "ginkgo",
    "e2e.test",
]
CONFORMANCE_FOCUS = r"\[Conformance\]"
# The e2e binaries a run can select, and the recipe that builds each: e2e.test
# holds test/e2e/common, e2e-storage.test test/e2e/storage (the subPath and
# in-tree volume specs) and its external-driver suites.
SUITES = {
    "e2e.test": "hack/build-control-plane.sh",
    "e2e-storage.test": "hack/parts/csi/build-e2e.sh",
    "e2e-dra.test": "hack/parts/dra/build-e2e.sh",
}


def ginkgo_run(
    procs: int, timeout_s: float, focus: str, skip: str, label_filter: str, output_dir: Path
) -> list[str]:
    """`ginkgo run` with the options both harnesses give it, up to the suite binary."""
    argv = [
        str(BIN / "ginkgo"),
        "run",
        f"--procs={procs}",
        f"--timeout={int(timeout_s)}s",
        f"--focus={focus}",
        "--no-color",
        # A spec quiet for this long has its goroutines dumped to the log:
        # what a hang is waiting on.
        "--poll-progress-after=5m",
        "--poll-progress-interval=5m",
        f"--output-dir={output_dir}",
        "--junit-report=junit.xml",
    ]
    if skip:
        argv.append(f"--skip={skip}")
    if label_filter:
        argv.append(f"--label-filter={label_filter}")
    return argv


class RunFailed(Exception):
    """The run could not produce results (its message says why)."""


@dataclass
class Options:
    kubelet: str  # "ours" | "upstream"
    workdir: Path
    focus: str = CONFORMANCE_FOCUS
    skip: str = ""
    procs: int = 4
    timeout_s: float = 75 * 60  # the whole suite, as ginkgo's --timeout
    node_ip: str = ""
    suite: str = "e2e.test"  # one of SUITES


def build(kubelets: list[str], suite: str = "e2e.test") -> None:
    targets = TARGETS + (["kubelet"] if "upstream" in kubelets else [])
    if not all(os.access(BIN / t, os.X_OK) for t in targets):
        print(f"building {' '.join(targets)} (first time: tens of minutes)", file=sys.stderr)
    # Always asked: the recipe also rebuilds e2e.test when its test main changed,
    # and returns at once when everything is current.
    r = subprocess.run(
        ["bash", str(REPO / "hack" / "build-control-plane.sh"), *targets],
        stdout=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        raise RunFailed(f"hack/build-control-plane.sh failed with {r.returncode}")
    recipe = SUITES[suite]
    if recipe != "hack/build-control-plane.sh":
        r = subprocess.run(["bash", str(REPO / recipe)], stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RunFailed(f"{recipe} failed with {r.returncode}")


def k8s_source() -> str:
    """The k8s.io/kubernetes module's source directory in the Go module cache."""
    env = dict(os.environ, GOFLAGS="-mod=mod")
    env["PATH"] = "/usr/local/go/bin:" + env.get("PATH", "")
    r = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=SRC,
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 or not r.stdout.strip():
        raise RunFailed(f"cannot locate the k8s.io/kubernetes source: {r.stderr.strip()}")
    return r.stdout.strip()


def build_images(directory: Path) -> dict[str, str]:
    return images.build_e2e(str(directory), str(BIN), k8s_source())


def host_ip() -> str:
    """The address the node reports (InternalIP): the one of the default route."""
    r = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True)
    m = re.search(r"\bsrc (\S+)", r.stdout)
    return m.group(1) if m else "127.0.0.1"


def kubelet_config(cp: ControlPlane, run_dir: Path) -> dict[str, Any]:
    """The same configuration for both kubelets: a cluster node as upstream
    defaults it, with what this machine needs changed (the launcher adds the
    ports, the read-only one off)."""
    return {
        "healthzBindAddress": "127.0.0.1",
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "podLogsDir": str(run_dir / "pod-logs"),
        "serializeImagePulls": False,
        **cluster_auth(cp),
        # The test images cannot be pulled again here: never collect them, and
        # do not let a busy shared disk evict test pods.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
    }


def upstream_version() -> str:
    r = subprocess.run([str(BIN / "kubelet"), "--version"], capture_output=True, text=True)
    return r.stdout.strip().removeprefix("Kubernetes ")


def ours_version() -> str:
    r = subprocess.run(
        [sys.executable, "-m", "kubelet", "--version"], capture_output=True, text=True
    )
    return r.stdout.strip().removeprefix("Kubernetes ")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def claim_slot() -> tuple[int, int]:
    """A slot no other harness on this machine holds: its number names the
    run's bridge, pod subnet and cgroup root. Returns (slot, fd); the fd holds
    the claim until closed, so two runs at once (a developer's and CI's) never
    share a bridge, hand out the same pod IPs, or remove each other's pod
    cgroups as orphans (both kubelets clean up pod cgroups they do not know)."""
    for idx in range(20, 250):
        fd = os.open(f"/tmp/kpy-conformance-net.{idx}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return idx, fd
    raise RunFailed("no free slot for the pod network and cgroup root")


CGROUP_FS = Path("/sys/fs/cgroup")


def _hierarchies() -> list[Path]:
    """One directory per mounted hierarchy: the v1 controllers, or the v2 root."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()]


def make_cgroup_root(name: str) -> None:
    """The kubelets' cgroupRoot, which the upstream kubelet requires to exist."""
    for h in _hierarchies():
        d = h / name
        d.mkdir(exist_ok=True)
        # A new v1 cpuset starts with no CPUs or memory nodes: inherit them.
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (h / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((h / f).read_text())


def remove_cgroup_root(name: str) -> None:
    for h in _hierarchies():
        root = h / name
        if not root.is_dir():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, root]:
            with contextlib.suppress(OSError):
                d.rmdir()


class Run:
    def __init__(self, opts: Options, image_tars: dict[str, str]) -> None:
        self.opts = opts
        self.image_tars = image_tars
        self.dir = opts.workdir / opts.kubelet
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node = f"conformance-{opts.kubelet}"
        self.cp: ControlPlane | None = None
        self.ctd: Containerd | None = None
        self.kubelet: subprocess.Popen[bytes] | None = None
        self.kubelet_log = self.dir / "kubelet.log"
        self._net_lock = -1
        self.cgroup_root = ""

    # ------------------------------------------------------------- cluster
    def control_plane(self) -> ControlPlane:
        """The run's control plane (a suite may want more controllers)."""
        return ControlPlane(str(self.dir / "cp"), controllers=True)

    def after_node_ready(self) -> None:
        """What a suite installs once the node is Ready (a driver, ...)."""

    def suite_binary(self) -> Path:
        return BIN / self.opts.suite

    def root_dir(self) -> Path:
        """The kubelet's --root-dir (a suite whose pods mount the kubelet's
        directories by their default paths needs /var/lib/kubelet)."""
        return self.dir / "root"

    def suite_args(self) -> list[str]:
        """Extra flags for the e2e binary."""
        return []

    def start(self) -> None:
        self.cp = self.control_plane().start()
        slot, self._net_lock = claim_slot()
        self.cgroup_root = f"kpy-conformance-{slot}"
        make_cgroup_root(self.cgroup_root)
        self.ctd = Containerd(
            str(self.dir / "ctd"), subnet=f"10.245.{slot}.0/24", bridge=f"kpc{slot}"
        )
        self.ctd.start()
        for path in self.image_tars.values():
            self.ctd.ctr("images", "import", "--all-platforms", path)
        self._start_kubelet()
        self._wait_node_ready()
        self.after_node_ready()

    def _start_kubelet(self) -> None:
        assert self.cp is not None and self.ctd is not None
        config = kubelet_config(self.cp, self.dir)
        config["cgroupRoot"] = "/" + self.cgroup_root
        ours = self.opts.kubelet == "ours"
        self.kubelet = KubeletProcess(
            self.dir, self.ctd.endpoint, self.node, cp=self.cp, config=config,
            kubeconfig=self.cp.node_kubeconfig(self.node), node_ip=self.opts.node_ip or host_ip(),
            read_only_port=False, port_flags=False, root_dir=self.root_dir(),
            command=KUBELET_COMMAND if ours else (str(BIN / "kubelet"),),
            flags=() if ours else ("--v=2",), log_file=self.kubelet_log, new_session=True,
        ).start().proc  # fmt: skip

    def _wait_node_ready(self, timeout: float = 180.0) -> None:
        assert self.cp is not None and self.kubelet is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_kubelet()
            self.cp.check_alive()
            r = self.cp.kubectl("get", "node", self.node, "-o", "json", check=False)
            if r.returncode == 0:
                conds = json.loads(r.stdout).get("status", {}).get("conditions", [])
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                    return
            time.sleep(1)
        raise RunFailed(
            f"node {self.node} not Ready after {timeout:.0f}s; kubelet log tail:\n"
            + log_tail(self.kubelet_log)
        )

    def _check_kubelet(self) -> None:
        assert self.kubelet is not None
        if self.kubelet.poll() is not None:
            raise RunFailed(
                f"the {self.opts.kubelet} kubelet exited with {self.kubelet.returncode}; "
                f"last lines of {self.kubelet_log}:\n{log_tail(self.kubelet_log)}"
            )

    def stop(self) -> None:
        if self.kubelet is not None:
            stop_process(self.kubelet, 30)
        if self.ctd is not None:
            self.ctd.stop()
        if self.cp is not None:
            self.cp.stop()
        # Volumes of pods the kubelet had no time to tear down.
        unmount_under(self.dir)
        remove_log_links_into(self.dir)
        if self.cgroup_root:
            remove_cgroup_root(self.cgroup_root)
        if self._net_lock >= 0:
            os.close(self._net_lock)
            self._net_lock = -1

    # ---------------------------------------------------------------- suite
    def ginkgo_argv(self) -> list[str]:
        assert self.cp is not None
        o = self.opts
        argv = ginkgo_run(o.procs, o.timeout_s, o.focus, o.skip, "", self.dir)
        argv += [
            str(self.suite_binary()),
            "--",
            f"--kubeconfig={self.cp.admin_kubeconfig}",
            "--provider=local",
            f"--kubectl-path={BIN / 'kubectl'}",
            f"--report-dir={self.dir / 'report'}",
            f"--kubelet-root-dir={self.root_dir()}",
            "--e2e-output-dir",
            str(self.dir / "report"),
            *self.suite_args(),
        ]
        return argv

    def run_suite(self) -> tuple[list[TestResult], str]:
        """The specs' results and the run's error ("" when it completed)."""
        (self.dir / "report").mkdir(exist_ok=True)
        junit = self.dir / "junit.xml"
        junit.unlink(missing_ok=True)
        console = self.dir / "ginkgo.log"
        error = ""
        with open(console, "wb") as out:
            proc = subprocess.Popen(
                self.ginkgo_argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
            # Ginkgo's own --timeout ends the suite and reports the running
            # specs; this is the backstop should ginkgo itself hang.
            deadline = time.monotonic() + self.opts.timeout_s + 300
            try:
                while proc.poll() is None:
                    try:
                        self._check_kubelet()
                    except RunFailed as err:
                        error = str(err)
                        break
                    if time.monotonic() > deadline:
                        error = f"ginkgo still running {self.opts.timeout_s + 300:.0f}s after start"
                        break
                    time.sleep(2)
            finally:
                # Also on Ctrl-C: ginkgo runs in its own session and would outlive us.
                if proc.poll() is None:
                    self._interrupt(proc)
        if not error and "Suite Timeout Elapsed" in log_tail(console, 400):
            error = f"the suite hit its {self.opts.timeout_s / 60:.0f} min timeout"
        if not junit.exists():
            raise RunFailed(
                (error + "\n" if error else "")
                + f"ginkgo wrote no JUnit report; last lines of {console}:\n"
                + log_tail(console)
            )
        tests = parse_junit(junit)
        # Specs that never started (the suite was interrupted first) look like
        # the ones --focus filtered out; ginkgo's count tells them apart.
        m = re.search(r"Will run (\d+) of \d+ specs", console.read_text(errors="replace"))
        if m and len(tests) < int(m.group(1)):
            missing = f"{int(m.group(1)) - len(tests)} of {m.group(1)} specs did not run"
            error = f"{error}; {missing}" if error else missing
        return tests, error

    def _interrupt(self, proc: subprocess.Popen[bytes]) -> None:
        # SIGINT makes ginkgo stop the specs and still write its reports.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_one(opts: Options, image_tars: dict[str, str], run_class: type[Run] = Run) -> RunResult:
    started = time.monotonic()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    version = ours_version() if opts.kubelet == "ours" else upstream_version()
    result = RunResult(
        kubelet=opts.kubelet,
        date=date,
        duration_s=0.0,
        procs=opts.procs,
        focus=opts.focus,
        skip=opts.skip,
        kubelet_version=version,
    )
    git = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    result.source = git.stdout.strip()
    run = run_class(opts, image_tars)
    try:
        try:
            run.start()
        except Unavailable as err:
            raise RunFailed(f"cluster did not start: {err}") from err
        print(f"{opts.kubelet}: node Ready, running the suite", file=sys.stderr)
        result.tests, result.error = run.run_suite()
    except RunFailed as err:
        result.error = str(err)
    finally:
        run.stop()
        result.duration_s = round(time.monotonic() - started, 1)
    return result


def copy_artifacts(run_dir: Path, out: Path) -> None:
    """The JUnit report and the logs next to the results, for reading failures."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("junit.xml", "ginkgo.log", "kubelet.log"):
        src = run_dir / name
        if src.exists():
            shutil.copyfile(src, out / name)
