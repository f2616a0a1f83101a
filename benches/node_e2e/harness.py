"""One node e2e run: the upstream suite (test/e2e_node of the pinned
k8s.io/kubernetes, built as e2e_node.test) against one kubelet.

The suite starts etcd, kube-apiserver and the namespace controller inside its
own process and launches `<--k8s-bin-dir>/kubelet` with the config it
generates. Around it the harness provides what a node of upstream's test
infrastructure would have: a private containerd with runc and bridge CNI and
the test images in its k8s.io namespace (built here, no registry), and
systemd stand-ins on the suite's PATH, through which it launches, stops and
restarts the kubelet. Each kubelet gets a fresh containerd and a fresh
/var/lib/kubelet, so nothing one run leaves behind reaches the next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benches.conformance.harness import (
    BIN,
    CACHE,
    K8S_VERSION,
    REPO,
    RunFailed,
    ginkgo_run,
    k8s_source,
    log_tail,
    ours_version,
    upstream_version,
)
from benches.node_e2e import dbus, host, kubelet_shim, results
from benches.node_e2e.systemd import SOCKET_ENV, UnitManager, install
from kubelet.testing import images, registry
from kubelet.testing.containerd import Containerd, Unavailable

__all__ = ["CACHE", "K8S_VERSION", "Options", "build", "build_images", "run_one"]

TARGETS = ["ginkgo", "e2e_node.test", "agnhost", "nnp", "sample-device-plugin", "kubectl"]
NODE_CONFORMANCE_FOCUS = r"\[NodeConformance\]"
# As upstream's node conformance jobs: the serial specs rewrite the kubelet's
# config and restart it, so they run alone (--serial).
DEFAULT_SKIP = r"\[Serial\]|\[Flaky\]"
# Registries whose images the local mirror serves (those the suite names).
MIRRORED = ("registry.k8s.io", "docker.io", "gcr.io")


@dataclass
class Options:
    kubelet: str  # "ours" | "upstream"
    workdir: Path
    focus: str = NODE_CONFORMANCE_FOCUS
    skip: str = DEFAULT_SKIP
    label_filter: str = ""
    procs: int = 4
    timeout_s: float = 120 * 60
    kubelet_flags: list[str] = field(default_factory=list)
    # The suite's own --feature-gates: its in-process components and the
    # kubelet's config get them (upstream's CI jobs pass some; several serial
    # specs write into the kubelet config's featureGates and panic on a nil map).
    feature_gates: str = ""
    # --service-feature-gates: the suite's in-process API server's gates (its
    # --feature-gates do not reach it; a field behind an alpha gate is dropped
    # from pod statuses without it).
    service_feature_gates: str = ""


def build(kubelets: list[str]) -> None:
    targets = TARGETS + (["kubelet"] if "upstream" in kubelets else [])
    if not all(os.access(BIN / t, os.X_OK) for t in targets):
        print(f"building {' '.join(targets)} (first time: tens of minutes)", file=sys.stderr)
    r = subprocess.run(
        ["bash", str(REPO / "hack" / "build-control-plane.sh"), *targets],
        stdout=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        raise RunFailed(f"hack/build-control-plane.sh failed with {r.returncode}")


def build_images(directory: Path) -> images.ImageSet:
    # Debian packages unpacked for images (nginx), kept between runs.
    return images.build_node_e2e(str(directory), str(BIN), k8s_source(), str(CACHE / "debs"))


def base_config() -> dict[str, object]:
    """The KubeletConfiguration the suite starts from (--kubelet-config-file):
    upstream's test/e2e_node/jenkins/default-kubelet-config.yaml as it is. The
    suite then adds its own settings and writes the fully defaulted result."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/",
        "podCIDR": "10.100.0.0/24",
        "volumeStatsAggPeriod": "10s",
        "fileCheckFrequency": "10s",
        "evictionPressureTransitionPeriod": "30s",
        "evictionHard": {
            "memory.available": "250Mi",
            "nodefs.available": "10%",
            "nodefs.inodesFree": "5%",
        },
        "evictionMinimumReclaim": {"nodefs.available": "5%", "nodefs.inodesFree": "5%"},
        "serializeImagePulls": False,
    }


class Run:
    def __init__(self, opts: Options, image_set: images.ImageSet) -> None:
        self.opts = opts
        self.images = image_set
        self.dir = (opts.workdir / opts.kubelet).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ctd: Containerd | None = None
        self.units: UnitManager | None = None
        self.bus: dbus.SystemBus | None = None
        self.registry: registry.Registry | None = None
        self.kubelet_log = self.dir / "report" / "kubelet.log"

    # ---------------------------------------------------------------- node
    def start(self) -> None:
        host.claim_pod_network()
        self.ctd = Containerd(str(self.dir / "ctd"), subnet=host.POD_SUBNET, bridge=host.BRIDGE)
        try:
            self.ctd.start()
        except Unavailable as err:
            raise RunFailed(f"containerd did not start: {err}") from err
        # The run's containerd where a node has it (in the run's mount namespace).
        os.symlink(self.ctd.socket, host.DEFAULT_CONTAINERD_SOCKET)
        for path in self.images.tars.values():
            self.ctd.ctr("images", "import", "--all-platforms", path)
        self._start_registry()
        self._write_pid_file()
        bus_dir = self.dir / "dbus"
        self.units = UnitManager(
            self.dir / "systemd", env={"DBUS_SYSTEM_BUS_ADDRESS": dbus.bus_address(bus_dir)}
        ).start()
        self.units.add_external(
            "containerd.service", self._ctd_pid(), self._start_containerd, self._stop_containerd
        )
        try:
            self.bus = dbus.SystemBus(bus_dir, self.units).start()
        except OSError as err:
            raise RunFailed(f"the private system bus did not start: {err}") from err
        install(self.dir / "sbin", sys.executable, REPO)
        self._write_kubelet_bin()
        (self.dir / "kubeletconfig.yaml").write_text(yaml.safe_dump(base_config()))

    def _start_registry(self) -> None:
        """A registry on 127.0.0.1 with every image the harness made, as the
        mirror containerd tries first for the registries they are named in:
        specs with imagePullPolicy Always (or that remove an image and pull it
        again) pull for real. An image the mirror lacks is asked of its own
        registry, which this machine cannot reach: the pull fails, as any pull
        of a missing image."""
        assert self.ctd is not None
        try:
            self.registry = registry.Registry(str(self.dir / "registry")).start()
            for ref, path in self.images.tars.items():
                for name in self.images.refs_in(path) or [ref]:
                    _, repo, tag = images.split_ref(name)
                    self.registry.push(f"{path}:{tag}", repo, tag)
        except (registry.Unavailable, subprocess.CalledProcessError) as err:
            raise RunFailed(f"the image mirror did not start: {err}") from err
        certs = os.path.join(self.ctd.directory, "certs.d")
        for upstream in MIRRORED:
            d = os.path.join(certs, upstream)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "hosts.toml"), "w") as fh:
                fh.write(
                    f'server = "https://{upstream}"\n\n'
                    f'[host."http://{self.registry.host}"]\n'
                    '  capabilities = ["pull", "resolve"]\n  skip_verify = true\n'
                )

    def _ctd_pid(self) -> int:
        assert self.ctd is not None and self.ctd.proc is not None
        return self.ctd.proc.pid

    def _write_pid_file(self) -> None:
        (self.dir / "ctd" / "containerd.pid").write_text(f"{self._ctd_pid()}\n")

    def _stop_containerd(self) -> None:
        # As systemd stops containerd.service (KillMode=process): containerd
        # goes, the shims and containers stay.
        assert self.ctd is not None and self.ctd.proc is not None
        self.ctd.proc.terminate()
        self.ctd.proc.wait(30)

    def _start_containerd(self) -> int:
        assert self.ctd is not None and self.ctd.bins is not None
        log = open(os.path.join(self.ctd.directory, "containerd.log"), "ab")
        with log:
            self.ctd.proc = subprocess.Popen(
                # The binary start() found: the same flavour as before the stop.
                [self.ctd.bins.containerd, "--config",
                 os.path.join(self.ctd.directory, "config.toml")],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while self.ctd.ctr("version", check=False).returncode != 0:
            if time.monotonic() > deadline or self.ctd.proc.poll() is not None:
                raise OSError(f"containerd did not come back: {self.ctd.log_tail()}")
            time.sleep(0.2)
        self._write_pid_file()
        return self.ctd.proc.pid

    def _write_kubelet_bin(self) -> None:
        """--k8s-bin-dir: the kubelet under test as `kubelet`."""
        bindir = self.dir / "k8s-bin"
        bindir.mkdir(exist_ok=True)
        kubelet = bindir / "kubelet"
        kubelet.unlink(missing_ok=True)
        if self.opts.kubelet == "upstream":
            kubelet.symlink_to(BIN / "kubelet")
            return
        kubelet.write_text(
            "#!/bin/sh\n# Our kubelet, from this checkout's venv.\n"
            f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m {kubelet_shim.__name__} "$@"\n'
        )
        kubelet.chmod(0o755)

    def stop(self) -> None:
        if self.registry is not None:
            self.registry.stop()
        if self.bus is not None:
            self.bus.stop()
        if self.units is not None:
            self.units.close()
        if self.ctd is not None:
            self.ctd.stop()
        host.release_pod_network()

    # --------------------------------------------------------------- suite
    def ginkgo_argv(self) -> list[str]:
        assert self.ctd is not None
        o = self.opts
        argv = ginkgo_run(o.procs, o.timeout_s, o.focus, o.skip, o.label_filter, self.dir)
        argv += [
            str(self._suite_binary()),
            "--",
            f"--k8s-bin-dir={self.dir / 'k8s-bin'}",
            f"--container-runtime-endpoint={self.ctd.endpoint}",
            f"--container-runtime-pid-file={self.dir / 'ctd' / 'containerd.pid'}",
            "--prepull-images=false",
            f"--report-dir={self.dir / 'report'}",
            f"--kubelet-config-file={self.dir / 'kubeletconfig.yaml'}",
            f"--kubectl-path={BIN / 'kubectl'}",
        ]
        if o.kubelet_flags:
            argv.append("--kubelet-flags=" + " ".join(o.kubelet_flags))
        if o.feature_gates:
            argv.append(f"--feature-gates={o.feature_gates}")
        if o.service_feature_gates:
            argv.append(f"--service-feature-gates={o.service_feature_gates}")
        return argv

    def _suite_binary(self) -> Path:
        """e2e_node.test, linked into the run directory: ginkgo runs a suite in
        the binary's directory, and the suite writes its kubeconfig, kubelet
        config and static pod directory into its working directory."""
        link = self.dir / "e2e_node.test"
        link.unlink(missing_ok=True)
        link.symlink_to(BIN / "e2e_node.test")
        return link

    def env(self) -> dict[str, str]:
        assert self.units is not None
        env = dict(os.environ)
        env["PATH"] = f"{self.dir / 'sbin'}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        env[SOCKET_ENV] = self.units.socket
        if self.bus is not None:
            env["DBUS_SYSTEM_BUS_ADDRESS"] = self.bus.address
        return env

    def run_suite(self) -> tuple[list[results.TestResult], str]:
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
                env=self.env(),
                start_new_session=True,
            )
            deadline = time.monotonic() + self.opts.timeout_s + 300
            try:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        error = f"ginkgo still running {self.opts.timeout_s + 300:.0f}s after start"
                        break
                    time.sleep(2)
            finally:
                if proc.poll() is None:
                    _interrupt(proc)
        text = console.read_text(errors="replace")
        if "Suite Timeout Elapsed" in text[-200_000:]:
            error = f"the suite hit its {self.opts.timeout_s / 60:.0f} min timeout"
        if not junit.exists():
            raise RunFailed(
                (error + "\n" if error else "")
                + f"ginkgo wrote no JUnit report; last lines of {console}:\n"
                + log_tail(console)
            )
        tests = results.parse_junit(junit, self.images.unavailable)
        if not tests:
            raise RunFailed(f"no spec ran; last lines of {console}:\n" + log_tail(console, 15))
        m = re.search(r"Will run (\d+) of \d+ specs", text)
        if m and len(tests) < int(m.group(1)):
            missing = f"{int(m.group(1)) - len(tests)} of {m.group(1)} specs did not run"
            error = f"{error}; {missing}" if error else missing
        if any(t.name.startswith("[SynchronizedBeforeSuite]") for t in tests):
            error = (error + "; " if error else "") + (
                "the suite's set-up failed; kubelet log tail:\n" + log_tail(self.kubelet_log, 30)
            )
        return tests, error

    def notes(self) -> list[str]:
        """What the harness had to change for this kubelet (read back from its log)."""
        found = []
        try:
            text = self.kubelet_log.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            if kubelet_shim.MARKER in line and line not in found:
                found.append(line.strip())
        return found


def _interrupt(proc: subprocess.Popen[bytes]) -> None:
    # SIGINT makes ginkgo stop the specs and still write its reports.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_one(opts: Options, image_set: images.ImageSet) -> results.NodeRunResult:
    """One kubelet's run. The machine-wide checks and the lock are taken here;
    the run itself happens in a child in a mount namespace of its own
    (host.make_paths_private), from which it reports back in a JSON file."""
    started = time.monotonic()
    version = ours_version() if opts.kubelet == "ours" else upstream_version()
    result = results.NodeRunResult(
        kubelet=opts.kubelet,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        duration_s=0.0,
        procs=opts.procs,
        focus=opts.focus,
        skip=opts.skip,
        label_filter=opts.label_filter,
        kubelet_version=version,
        images_unavailable=sorted(image_set.unavailable),
    )
    git = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    result.source = git.stdout.strip()
    run_dir = (opts.workdir / opts.kubelet).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    spec, report = run_dir / "run-spec.json", run_dir / "run-result.json"
    report.unlink(missing_ok=True)
    spec.write_text(json.dumps({"opts": _opts_json(opts), "tars": image_set.tars,
                                "unavailable": sorted(image_set.unavailable)}))  # fmt: skip
    hard = base_config()["evictionHard"]
    assert isinstance(hard, dict)
    for note in host.disk_pressure_notes(
        str(run_dir), host.disk_thresholds(hard, opts.kubelet_flags)
    ):
        print(f"{opts.kubelet}: WARNING: {note}", file=sys.stderr)
        result.notes.append(note)
    lock = host.take_lock()
    created = []
    try:
        host.check_ports()
        host.make_cgroup_subtree()
        # Empty mount points for the namespace's bind mounts, where the host has none.
        for path in host.PRIVATE_PATHS:
            if not os.path.isdir(path):
                os.makedirs(path)
                created.append(path)
        _run_child(host.namespace_argv([sys.executable, "-m", __name__, str(spec), str(report)]))
        child = json.loads(report.read_text())
        result.tests = [results.TestResult(**t) for t in child["tests"]]
        result.error = child["error"]
        result.notes += child["notes"]
    except (RunFailed, OSError, ValueError) as err:
        result.error = str(err)
    finally:
        host.remove_mount_points(created)
        left = host.remove_cgroup_subtree(wait_s=30)
        if left:
            note = f"cgroups left behind (a process still in them): {left[:3]}"
            result.error = f"{result.error}; {note}" if result.error else note
        os.close(lock)
        result.duration_s = round(time.monotonic() - started, 1)
    return result


def _opts_json(opts: Options) -> dict[str, object]:
    d = dataclasses.asdict(opts)
    d["workdir"] = str(opts.workdir)
    return d


def _run_child(argv: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), **host.subtrees_env())
    proc = subprocess.Popen(argv, env=env, preexec_fn=host.enter_cgroup_subtree)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        # The child stops its suite, kubelet and containerd, and still reports.
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        raise
    if rc != 0:
        raise RunFailed(f"the run's process exited with {rc}")


def _child_main(spec_path: str, report_path: str) -> int:
    """In the run's mount namespace: make the fixed paths private, run, report."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    spec = json.loads(Path(spec_path).read_text())
    o = spec["opts"]
    opts = Options(**{**o, "workdir": Path(o["workdir"])})
    run = Run(opts, images.ImageSet(spec["tars"], set(spec["unavailable"])))
    out: dict[str, object] = {"tests": [], "error": "", "notes": []}
    try:
        host.make_paths_private(run.dir)
        run.start()
        print(f"{opts.kubelet}: node prepared, running the suite", file=sys.stderr)
        tests, out["error"] = run.run_suite()
        out["tests"] = [dataclasses.asdict(t) for t in tests]
    except RunFailed as err:
        out["error"] = str(err)
    except KeyboardInterrupt:
        out["error"] = "interrupted"
    finally:
        run.stop()
        out["notes"] = run.notes()
        Path(report_path).write_text(json.dumps(out))
    return 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def copy_artifacts(run_dir: Path, out: Path) -> None:
    """The JUnit report and the logs next to the results, for reading failures."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("junit.xml", "ginkgo.log", "report/kubelet.log"):
        src = run_dir / name
        if src.exists():
            shutil.copyfile(src, out / Path(name).name)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2]))
