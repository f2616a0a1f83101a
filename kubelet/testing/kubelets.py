"""One way to run a kubelet in tests and benchmarks.

- KubeletProcess: the `kubelet` command (ours, or any kubelet binary given as
  `command`) as a process, standalone (static pods from a manifest directory)
  or joined to a cluster (a kubeconfig or a bootstrap kubeconfig), on whatever
  runtime endpoint it is given (the simulated runtime or containerd). It can be
  stopped or killed and started again on the same root dir, cert dir and
  config, as a restarted node would be; every start logs to a file of its own.
- InProcessKubelet: a `Kubelet` object running on this event loop against a
  real runtime endpoint, with fast periods, for tests that look inside it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
from kubelet.kubelet import Kubelet
from kubelet.kubelet_runtime_subsystems import RuntimeSetup
from kubelet.kubelet_subsystems import NodeSetup
from kubelet.kuberuntime.backoff import Backoff
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.net import free_port, wait_http
from kubelet.testing.process import stop_process, unmount_under
from kubelet.testing.wait import wait_for_async
from kubelet.types import ContainerStatus, ObjectReference, Pod

KUBELET_COMMAND = (sys.executable, "-m", "kubelet")
# A node without an API server: no webhook to ask about tokens or access, and no
# cgroups of its own at the machine's root.
STANDALONE_CONFIG: dict[str, Any] = {
    "address": "127.0.0.1",
    "cgroupsPerQOS": False,
    "enforceNodeAllocatable": [],
    "authentication": {"webhook": {"enabled": False}},
    "authorization": {"mode": "AlwaysAllow"},
}
CONFIG_HEADER = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
LOG_TAIL = 3000
BUSYBOX = "busybox:1.36"


def cluster_auth(cp: ControlPlane) -> dict[str, Any]:
    """The server auth a cluster kubelet runs with: tokens and access checked
    with the API server, client certificates from the cluster's CA."""
    return {
        "authorization": {"mode": "Webhook"},
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": cp.pki.ca.cert},
        },
    }


# The test machine's disk may sit near upstream's default thresholds (imagefs
# 15%, nodefs 10%), and a test's kubelet evicting its pods for the host's state
# is noise; tests of eviction set their own.
TEST_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "1%",
    "nodefs.inodesFree": "1%",
    "imagefs.available": "1%",
}


def _write_config(
    workdir: Path, config: Mapping[str, Any] | None, ports: Mapping[str, int]
) -> Path:
    """The kubelet's config file in workdir: the test defaults, the ports (when
    they are not flags) and `config` over them."""
    path = workdir / "kubelet-config.yaml"
    doc = {**CONFIG_HEADER, "evictionHard": TEST_EVICTION_HARD, **ports, **(config or {})}
    path.write_text(yaml.safe_dump(doc))
    return path


def _optional_flags(*pairs: tuple[str, str | Path | None]) -> list[str]:
    """`flag value` for each pair whose value is given."""
    return [arg for flag, value in pairs if value is not None for arg in (flag, str(value))]


class KubeletProcess:
    """A kubelet command in `workdir`: its config file (`config` written there,
    or `config_file` as it is), root dir (unless given), cert dir and its own
    logs live there. Ports are picked once, so a restart serves on the same
    ones; by default they are passed as flags (a `--config` among `flags` may
    then replace the whole file), with `port_flags=False` they go into the
    config file. `read_only_port=False` turns that port off. Each start logs
    to a new file in `workdir`, or appends to `log_file` when that is given."""

    def __init__(
        self,
        workdir: Path,
        endpoint: str,
        node_name: str,
        *,
        config: Mapping[str, Any] | None = None,
        config_file: Path | None = None,
        flags: Sequence[str] = (),
        manifests: Path | None = None,
        cp: ControlPlane | None = None,
        kubeconfig: str | None = None,
        bootstrap_kubeconfig: str | None = None,
        node_ip: str | None = None,
        root_dir: Path | None = None,
        pod_logs_dir: Path | None = None,
        read_only_port: bool = True,
        port_flags: bool = True,
        command: Sequence[str] = KUBELET_COMMAND,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        new_session: bool = False,
        stop_timeout: float = 30,
        log_file: Path | None = None,
    ) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.endpoint, self.node, self._cp = endpoint, node_name, cp
        self.manifests = manifests
        self.root = root_dir or workdir / "root"
        self.pki = workdir / "pki"
        self.port, self.healthz_port = free_port(), free_port()
        self.read_only_port = free_port() if read_only_port else 0
        self.env, self.cwd = (dict(env) if env is not None else None), cwd
        self.new_session, self.stop_timeout = new_session, stop_timeout
        ports = {"port": self.port, "readOnlyPort": self.read_only_port,
                 "healthzPort": self.healthz_port}  # fmt: skip
        if config_file is None:
            config_file = _write_config(workdir, config, {} if port_flags else ports)
        else:
            assert config is None and port_flags, "a given config file is used as it is"
        self.config_path = config_file
        self.argv = [*command, "--config", str(self.config_path)]
        self.argv += _optional_flags(
            ("--bootstrap-kubeconfig", bootstrap_kubeconfig),
            ("--kubeconfig", kubeconfig),
            ("--hostname-override", node_name),
            ("--node-ip", node_ip),
        )
        if port_flags:
            self.argv += ["--port", str(self.port), "--read-only-port", str(self.read_only_port),
                          "--healthz-port", str(self.healthz_port)]  # fmt: skip
        self.argv += ["--container-runtime-endpoint", endpoint]
        self.argv += _optional_flags(("--pod-manifest-path", manifests))
        self.argv += ["--root-dir", str(self.root), "--cert-dir", str(self.pki)]
        self.argv += _optional_flags(("--pod-logs-dir", pod_logs_dir))
        self.argv += flags
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_files: list[Path] = []
        self._one_log = log_file

    # --------------------------------------------------------------- process
    @property
    def starts(self) -> int:
        return len(self.log_files)

    @property
    def log(self) -> Path:
        """The current (last) start's log."""
        return self.log_files[-1]

    def start(self) -> KubeletProcess:
        self.log_files.append(self._one_log or self.dir / f"kubelet-{time.monotonic_ns()}.log")
        with open(self.log, "ab") as out:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.new_session,
            )
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The current start's process."""
        assert self._proc is not None, "the kubelet was never started"
        return self._proc

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check(self) -> None:
        """RuntimeError with the log's tail when the process has exited."""
        rc = self.proc.poll()
        if rc is not None:
            raise RuntimeError(f"kubelet exited {rc}: {self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """`sig` (SIGKILL after the stop timeout); the exit status. A cluster
        kubelet stopped by SIGTERM leaves nothing mounted: it bind-mounts its
        root dir onto itself (rshared, for CSI node plugins) as upstream does."""
        rc = stop_process(self.proc, self.stop_timeout, sig)
        if self._cp is not None and sig == signal.SIGTERM:
            unmount_under(self.root)
        return rc

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        return self.log.read_text(errors="replace")[-limit:] if self.log_files else ""

    def logs(self) -> str:
        """Every start's log, in order."""
        files = dict.fromkeys(self.log_files)  # one file for all starts: once
        return "".join(f.read_text(errors="replace") for f in files if f.exists())

    # --------------------------------------------------------- its own ports
    def pods(self) -> dict[str, dict[str, Any]]:
        """The pods the read-only port lists, by name."""
        items = json.loads(wait_http(f"http://127.0.0.1:{self.read_only_port}/pods"))["items"]
        return {p["metadata"]["name"]: p for p in items}

    def serving(self) -> bool:
        """This process answers on its healthz port (the node's Ready condition in
        the API may still be the previous process's)."""
        self.check()
        url = f"http://127.0.0.1:{self.healthz_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.read_only_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return str(r.read().decode())

    # ------------------------------------------------------------- API views
    @property
    def cp(self) -> ControlPlane:
        """The control plane this kubelet is joined to."""
        assert self._cp is not None, "a standalone kubelet has no API server"
        return self._cp

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster's admin."""
        return self.cp.kubectl(*args, check=check)

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def create(self, *objects: Mapping[str, Any]) -> None:
        """kubectl create of `objects` (from a file in the work dir)."""
        self._kubectl_file("create", objects)

    def apply(self, *objects: Mapping[str, Any]) -> None:
        self._kubectl_file("apply", objects)

    def _kubectl_file(self, verb: str, objects: Sequence[Mapping[str, Any]]) -> None:
        path = self.dir / f"objects-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all([dict(o) for o in objects]))
        self.kubectl(verb, "-f", str(path))

    def node_conditions(self) -> dict[str, dict[str, Any]]:
        n = self.kubectl_json("get", "node", self.node)
        return {c["type"]: c for c in n["status"].get("conditions", [])}

    def ready(self) -> bool:
        """The Node is Ready in the API (RuntimeError if the process died)."""
        self.check()
        return self.node_conditions().get("Ready", {}).get("status") == "True"

    def api_pods(self, ns: str) -> dict[str, dict[str, Any]]:
        items = self.kubectl_json("get", "pods", "-n", ns, "--field-selector",
                                  f"spec.nodeName={self.node}")["items"]  # fmt: skip
        return {p["metadata"]["name"]: p for p in items}

    def events(self, ns: str) -> list[dict[str, Any]]:
        return list(self.kubectl_json("get", "events", "-n", ns)["items"])


def sleeper(name: str = "c", image: str = BUSYBOX, **fields: Any) -> dict[str, Any]:
    """A container that sleeps for ever, with `fields` (probes, say) added."""
    return {"name": name, "image": image, "command": ["sleep", "infinity"], **fields}


def sleeper_pod(name: str, image: str = BUSYBOX) -> dict[str, Any]:
    """A static pod whose one container, c, sleeps for ever."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [sleeper("c", image)]},
    }


def write_manifest(directory: Path, pod: Mapping[str, Any], suffix: str = ".yaml") -> Path:
    """`pod` as a static pod file named after it (JSON for a .json suffix),
    written atomically as editors and config tools do."""
    path = directory / f"{pod['metadata']['name']}{suffix}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pod) if suffix == ".json" else yaml.safe_dump(dict(pod)))
    tmp.rename(path)
    return path


def standalone_kubelet(
    workdir: Path, endpoint: str, manifests: Path, *flags: str, node_name: str = "node-b"
) -> KubeletProcess:
    """Our kubelet started without an API server: static pods from `manifests`,
    anonymous AlwaysAllow auth on its ports. Its config file says maxPods 50 and
    a flag says 70, so a test can tell which one won."""
    return KubeletProcess(
        workdir,
        endpoint,
        node_name,
        config={
            "maxPods": 50,
            "address": "127.0.0.1",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "fileCheckFrequency": "1s",
            "plegRelistPeriod": "100ms",
        },
        flags=(
            "--max-pods",
            "70",
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            *flags,
        ),
        manifests=manifests,
        pod_logs_dir=workdir / "logs",
    ).start()


def cluster_kubelet(
    cp: ControlPlane,
    workdir: Path,
    endpoint: str,
    node_name: str,
    *,
    config: Mapping[str, Any] | None = None,
    manifests: Path | None = None,
    flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    command: Sequence[str] = KUBELET_COMMAND,
) -> KubeletProcess:
    """Our kubelet started and joined to `cp` as `node_name` with a node
    kubeconfig, as a cluster runs it (cluster_auth), on 127.0.0.1, with short
    status and lease periods; `config` adds to or overrides its fields, `flags`
    are added, `env` and `command` as KubeletProcess takes them."""
    return KubeletProcess(
        workdir,
        endpoint,
        node_name,
        cp=cp,
        config={
            "maxPods": 150,
            "address": "127.0.0.1",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "plegRelistPeriod": "100ms",
            "nodeStatusUpdateFrequency": "2s",
            "nodeLeaseDurationSeconds": 8,
            **cluster_auth(cp),
            **(config or {}),
        },
        flags=("--node-labels", "example.com/pool=py", *flags),
        env=env,
        command=command,
        kubeconfig=cp.node_kubeconfig(node_name),
        node_ip="127.0.0.1",
        manifests=manifests,
        read_only_port=False,
        pod_logs_dir=workdir / "logs",
    ).start()


def remove_all_pods(endpoint: str) -> None:
    """Stop and remove every sandbox of the runtime at `endpoint` (one shared
    with other tests' kubelets, after a test's kubelet is gone)."""

    async def run() -> None:
        rt = RemoteRuntimeService(endpoint, 60)
        try:
            for sb in await rt.list_pod_sandbox():
                await rt.stop_pod_sandbox(sb.id)
                await rt.remove_pod_sandbox(sb.id)
        finally:
            await rt.close()

    asyncio.run(run())


# ------------------------------------------------------------------ in process


class EventLog:
    """An event recorder that keeps what it is given: (object name, type,
    reason, message) in `events`, the whole reference in `refs` and the
    Event's annotations in `annotations`."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []
        self.refs: list[ObjectReference] = []
        self.annotations: list[dict[str, str]] = []

    def event(self, ref: ObjectReference, etype: str, reason: str, message: str) -> None:
        self.annotated_event(ref, {}, etype, reason, message)

    def annotated_event(
        self, ref: ObjectReference, annotations: Mapping[str, str], etype: str, reason: str,
        message: str,
    ) -> None:  # fmt: skip
        self.events.append((ref.get("name", ""), etype, reason, message))
        self.refs.append(ref)
        self.annotations.append(dict(annotations))


class InProcessKubelet:
    """A Kubelet object on this event loop, with its static pod directory and
    the runtime client it talks through."""

    def __init__(
        self,
        kubelet: Kubelet,
        manifests: Path,
        rt: RemoteRuntimeService,
        node_name: str,
        events: EventLog,
    ) -> None:
        self.kubelet = kubelet
        self.manifests = manifests
        self.rt = rt
        self.node_name = node_name
        self.events = events

    def write(self, name: str, containers: list[dict[str, Any]], **spec: Any) -> Path:
        """A static pod manifest (see write_manifest)."""
        meta = spec.pop("metadata", {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **meta},
            "spec": {"containers": containers, **spec},
        }
        return write_manifest(self.manifests, pod)

    def record_events(self) -> EventLog:
        """The events of every part of the kubelet, kept since it was built
        (its recorder)."""
        return self.events

    def pod(self, name: str) -> Pod | None:
        for p in self.kubelet.host.get_pods():
            if p["metadata"]["name"] == f"{name}-{self.node_name}":
                return p
        return None

    def phase(self, name: str) -> str | None:
        p = self.pod(name)
        return p.get("status", {}).get("phase") if p else None

    def container(self, name: str, cname: str) -> ContainerStatus:
        p = self.pod(name)
        assert p is not None
        st = p["status"]
        for c in st.get("containerStatuses", []) + st.get("initContainerStatuses", []):
            if c["name"] == cname:
                return c
        raise KeyError(cname)

    async def wait(self, pred: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
        """Until pred() holds; a pod or field not there yet (KeyError, TypeError)
        or a failed assertion inside pred counts as not yet."""
        await wait_for_async(
            what or repr(pred), pred, timeout, 0.1, (KeyError, TypeError, AssertionError)
        )


def fast_config(tmp_path: Path, manifests: Path, **overrides: Any) -> KubeletConfiguration:
    """A standalone node's configuration with periods short enough for a test."""
    cfg = KubeletConfiguration()
    cfg.static_pod_path = str(manifests)
    cfg.pleg_relist_period = 0.1
    cfg.file_check_frequency = 1.0
    cfg.sync_frequency = 10.0
    cfg.pod_logs_dir = str(tmp_path / "logs")
    cfg.cgroups_per_qos = False
    cfg.max_pods = 500  # the 200-pod test is over the default 110
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


@asynccontextmanager
async def in_process_kubelet(
    endpoint: str,
    tmp_path: Path,
    node_name: str = "node-a",
    machine_topology: MachineTopology | None = None,
    allocatable: dict[str, str] | None = None,
    recorder: EventLog | None = None,
    **overrides: Any,
) -> AsyncIterator[InProcessKubelet]:
    """A running InProcessKubelet on the runtime at `endpoint`, its manifests in
    `tmp_path`/manifests; `overrides` set configuration fields; `recorder`
    keeps the events (a new EventLog if left out); `machine_topology` replaces
    this machine's (a fake NUMA machine, say); `allocatable` what admission
    counts against (as the command computes it from capacity and
    reservations). Stopped when the block ends; a second one on the same
    `tmp_path` is a restart of the first."""
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    events = recorder if recorder is not None else EventLog()
    cfg = fast_config(tmp_path, manifests, **overrides)
    rt = RemoteRuntimeService(endpoint, 10)
    img = RemoteImageService(endpoint, 10)
    k = Kubelet(
        cfg,
        node_name,
        str(tmp_path / "root"),
        rt,
        img,
        recorder=events,
        node_setup=NodeSetup(
            ip="192.0.2.10", machine_topology=machine_topology, allocatable=allocatable
        ),
        # Upstream is 10s doubling to 5m; shrunk so tests see several restarts.
        runtime_setup=RuntimeSetup(
            crash_backoff=Backoff(0.5, 4.0), image_backoff=Backoff(0.5, 4.0)
        ),
    )
    task = asyncio.create_task(k.run())
    try:
        yield InProcessKubelet(k, manifests, rt, node_name, events)
    finally:
        await k.stop()
        await asyncio.wait_for(task, 30)
        await rt.close()
