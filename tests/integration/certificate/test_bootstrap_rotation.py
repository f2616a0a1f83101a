"""TLS bootstrapping and certificate rotation against the real control plane
(bootstrap token auth, kube-controller-manager's csrsigning/csrapproving with a
2-minute signing duration), with the `kubelet` command on the simulated runtime."""

from __future__ import annotations

import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from kubelet.certificate.store import load_pair_file
from kubelet.testing.controlplane import ControlPlane, cache_bin
from tests.fixtures.cluster import start_control_plane
from tests.fixtures.simruntime import SimRuntimeProc, start_simruntime
from tests.integration.cluster.test_cluster_kubelet import wait_for
from tests.integration.core.test_command import free_port

pytestmark = pytest.mark.cluster

NODE = "py-boot-node"


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    d = str(tmp_path_factory.mktemp("cp-bootstrap"))
    c = start_control_plane(
        ControlPlane(d, controllers=True, bootstrap_tokens=True, cluster_signing_duration="2m")
    )
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntimeProc]:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"simb-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    s = start_simruntime(d)
    try:
        yield s
    finally:
        s.stop()


class BootKubelet:
    """A kubelet that starts from a bootstrap kubeconfig alone."""

    def __init__(self, cp: ControlPlane, tmp: Path, sim: SimRuntimeProc, name: str) -> None:
        self.cp, self.tmp, self.name = cp, tmp, name
        self.pki = tmp / "pki"
        self.kubeconfig = tmp / "kubelet.kubeconfig"
        cfg = tmp / "config.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": "127.0.0.1",
                    "cgroupsPerQOS": False,
                    "enforceNodeAllocatable": [],
                    "nodeStatusUpdateFrequency": "2s",
                    "nodeLeaseDurationSeconds": 8,
                    "rotateCertificates": True,
                    "serverTLSBootstrap": True,
                    "authorization": {"mode": "Webhook"},
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": cp.pki.ca.cert},
                    },
                }
            )
        )
        self.log = tmp / "kubelet.log"
        self.port = free_port()
        self.argv = [
            sys.executable, "-m", "kubelet",
            "--config", str(cfg),
            "--bootstrap-kubeconfig", cp.bootstrap_kubeconfig(str(tmp / "bootstrap.kubeconfig")),
            "--kubeconfig", str(self.kubeconfig),
            "--hostname-override", name,
            "--node-ip", "127.0.0.1",
            "--port", str(self.port),
            "--read-only-port", "0",
            "--healthz-port", str(free_port()),
            "--container-runtime-endpoint", sim.endpoint,
            "--root-dir", str(tmp / "root"),
            "--cert-dir", str(self.pki),
            "--pod-logs-dir", str(tmp / "logs"),
        ]  # fmt: skip
        self.proc = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"kubelet exited {self.proc.returncode}: {self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text()[-3000:]

    def pairs(self, prefix: str) -> list[Path]:
        if not self.pki.exists():
            return []
        return sorted(
            p for p in self.pki.glob(f"{prefix}-*.pem") if not p.name.endswith("-current.pem")
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def kj(cp: ControlPlane, *args: str) -> Any:
    return json.loads(cp.kubectl(*args, "-o", "json").stdout)


def ready(cp: ControlPlane, k: BootKubelet) -> bool:
    k.alive()
    n = kj(cp, "get", "node", k.name)
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])
    )


def csrs(cp: ControlPlane) -> list[dict[str, Any]]:
    return list(kj(cp, "get", "csr")["items"])


class ServingApprover:
    """Approves this node's kubelet-serving CSRs as an operator would (the
    controller-manager does not approve serving certificates)."""

    def __init__(self, cp: ControlPlane, node: str) -> None:
        self.cp, self.node = cp, node
        self.approved: set[str] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(1.0):
            try:
                items = csrs(self.cp)
            except Exception:
                continue
            for c in items:
                spec, name = c["spec"], c["metadata"]["name"]
                if (
                    spec["signerName"] == "kubernetes.io/kubelet-serving"
                    and spec["username"] == f"system:node:{self.node}"
                    and not c.get("status", {}).get("conditions")
                    and name not in self.approved
                ):
                    self.cp.kubectl("certificate", "approve", name, check=False)
                    self.approved.add(name)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


@pytest.fixture(scope="module")
def node(
    cp: ControlPlane, sim: SimRuntimeProc, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BootKubelet]:
    approver = ServingApprover(cp, NODE)
    k = BootKubelet(cp, tmp_path_factory.mktemp("boot-kubelet"), sim, NODE)
    try:
        wait_for("the bootstrapped Node to be Ready", lambda: ready(cp, k), timeout=90)
        yield k
    finally:
        approver.stop()
        try:
            # Pods go first so the kubelet tears their volumes (tmpfs mounts) down.
            cp.kubectl(
                "delete", "pod", "--all", "-n", "default", "--wait", "--timeout=40s", check=False
            )
        except subprocess.TimeoutExpired:
            pass
        finally:
            k.stop()
            unmount_under(k.tmp)
            print(f"kubelet log: {k.log}")


def unmount_under(path: Path) -> None:
    """Unmount what a stopped kubelet left mounted under its own directory."""
    with open("/proc/self/mounts") as fh:
        mounts = [line.split()[1] for line in fh]
    for m in sorted(mounts, reverse=True):
        if m.startswith(str(path) + "/"):
            subprocess.run(["umount", m], check=False)


def test_node_joins_from_a_bootstrap_kubeconfig_and_runs_a_pod(
    cp: ControlPlane, node: BootKubelet
) -> None:
    current = node.pki / "kubelet-client-current.pem"
    assert current.is_symlink()
    target = Path(os.readlink(current))
    assert target.is_absolute() and target.parent == node.pki.resolve()
    assert target.name.startswith("kubelet-client-2")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    pair = load_pair_file(str(current))
    assert pair.common_name == f"system:node:{NODE}"
    assert pair.organizations == ["system:nodes"]
    assert not (node.pki / "kubelet-client.key.tmp").exists()
    # The kubeconfig the kubelet wrote points at the current symlink.
    kc = yaml.safe_load(node.kubeconfig.read_text())
    assert stat.S_IMODE(node.kubeconfig.stat().st_mode) == 0o600
    user = kc["users"][0]["user"]
    assert user == {"client-certificate": str(current), "client-key": str(current)}
    # The bootstrap CSR: digest-named, asked for by the bootstrap token, auto-approved.
    boot = [
        c for c in csrs(cp) if c["spec"]["username"] == f"system:bootstrap:{cp.BOOTSTRAP_TOKEN_ID}"
    ]
    assert boot and boot[0]["metadata"]["name"].startswith("node-csr-")
    assert boot[0]["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert sorted(boot[0]["spec"]["usages"]) == ["client auth", "digital signature"]
    assert any(c["type"] == "Approved" for c in boot[0]["status"]["conditions"])

    # The certificate metrics, read from the kubelet port as a scraper would,
    # verifying the served pair against the cluster CA (the API server will not
    # proxy to a loopback node address). The serving pair exists once the
    # approver got to its request.
    ctx = ssl.create_default_context(cafile=cp.pki.ca.cert)
    ctx.load_cert_chain(
        os.path.join(cp.pki.dir, "apiserver-kubelet-client.crt"),
        os.path.join(cp.pki.dir, "apiserver-kubelet-client.key"),
    )

    def cert_ttls() -> dict[str, float] | None:
        url = f"https://127.0.0.1:{node.port}/metrics"
        with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
            raw = resp.read().decode()
        ttl = {
            ln.split()[0]: float(ln.split()[1])
            for ln in raw.splitlines()
            if ln.startswith("kubelet_certificate_manager_") and "_ttl_seconds " in ln
        }
        return ttl if len(ttl) == 2 and all(v < 1e9 for v in ttl.values()) else None

    ttl = wait_for("finite certificate TTL metrics", cert_ttls, timeout=60, every=1)
    assert 0 < ttl["kubelet_certificate_manager_client_ttl_seconds"] <= 120
    assert 0 < ttl["kubelet_certificate_manager_server_ttl_seconds"] <= 120

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "boot-pod", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "while true; do echo tick; sleep 1; done"],
                }
            ],
        },
    }
    path = node.tmp / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    cp.kubectl("create", "-f", str(path))
    wait_for(
        "the pod to run",
        lambda: (
            kj(cp, "get", "pod", "boot-pod", "-n", "default")["status"].get("phase") == "Running"
        ),
        timeout=60,
    )


# The short form (one client rotation) runs in every CI run; the long one (two,
# up to about 4 min) behind `hack/test.sh -m slow`.
@pytest.mark.parametrize("client_rotations", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_client_and_serving_certificates_rotate_under_load(
    cp: ControlPlane, node: BootKubelet, client_rotations: int
) -> None:
    """2-minute certificates (5 minutes back-dated by the signer) are renewed
    every 0-1.3 minutes: client rotations while the node stays Ready and its
    Lease renews, and a serving rotation under a running `kubectl logs -f`."""
    first_serving = wait_for("a serving certificate", lambda: node.pairs("kubelet-server"), 60)
    logs = subprocess.Popen(
        [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={cp.admin_kubeconfig}",
         "logs", "-f", "boot-pod", "-n", "default"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: list[bytes] = []

    def read() -> None:
        assert logs.stdout is not None
        for ln in iter(logs.stdout.readline, b""):
            lines.append(ln)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        start_clients = len(node.pairs("kubelet-client"))
        renew_times: set[str] = set()

        def rotated() -> bool:
            node.alive()
            assert ready(cp, node), "the node left Ready during rotation"
            lease = kj(cp, "get", "lease", NODE, "-n", "kube-node-lease")
            renew_times.add(lease["spec"]["renewTime"])
            clients = len(node.pairs("kubelet-client")) - start_clients
            servers = len(node.pairs("kubelet-server")) - len(first_serving)
            return clients >= client_rotations and servers >= 1

        wait_for("client and serving rotations", rotated, timeout=240, every=3)
        assert len(renew_times) > 3
        # The log stream opened before the serving rotation is still flowing.
        n = len(lines)
        wait_for("kubectl logs -f to keep streaming", lambda: len(lines) > n + 2, timeout=20)
        assert logs.poll() is None, b"".join(lines[-20:])
        # A new connection to the kubelet port is served the current pair...
        served = x509.load_pem_x509_certificate(
            ssl.get_server_certificate(("127.0.0.1", node.port)).encode()
        )
        current = load_pair_file(str(node.pki / "kubelet-server-current.pem"))
        assert served.serial_number == current.leaf.serial_number
        assert load_pair_file(str(first_serving[0])).leaf.serial_number != served.serial_number
        assert current.ip_addresses() == ["127.0.0.1"] and current.dns_names() == [NODE]
        # ...and new API server proxy requests work.
        out = cp.kubectl("logs", "boot-pod", "-n", "default", "--tail=1")
        assert "tick" in out.stdout
        # Statuses flow: the node's heartbeat is recent.
        n_obj = kj(cp, "get", "node", NODE)
        ready_cond = next(c for c in n_obj["status"]["conditions"] if c["type"] == "Ready")
        assert ready_cond["status"] == "True"
    finally:
        logs.terminate()
        logs.wait(10)


def test_killed_while_waiting_for_approval_reuses_its_key_and_request(
    cp: ControlPlane, tmp_path: Path
) -> None:
    name = "py-boot-killed"
    cp.kubectl("delete", "clusterrolebinding", "kubeadm:node-autoapprove-bootstrap")
    # A runtime of its own: a kubelet owns every sandbox of the runtime it talks to.
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"simk-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(parents=True)
    sim = start_simruntime(d)
    k = BootKubelet(cp, tmp_path, sim, name)
    try:
        tmp_key = k.pki / "kubelet-client.key.tmp"

        def pending() -> list[dict[str, Any]]:
            k.alive()
            return [
                c
                for c in csrs(cp)
                if c["metadata"]["name"].startswith("node-csr-")
                and not c.get("status", {}).get("conditions")
            ]

        first = wait_for("a pending bootstrap CSR", pending, timeout=60)
        assert tmp_key.exists()
        key_before = tmp_key.read_bytes()
        k.proc.send_signal(signal.SIGKILL)
        k.proc.wait()
        assert not k.kubeconfig.exists()
        k.proc = k.start()
        wait_for(
            "the restarted kubelet to find its pending request",
            lambda: "reusing it" in k.log.read_text(),
            timeout=60,
        )
        assert tmp_key.read_bytes() == key_before
        assert [c["metadata"]["name"] for c in pending()] == [first[0]["metadata"]["name"]]
        cp.kubectl("certificate", "approve", first[0]["metadata"]["name"])
        wait_for("the restarted kubelet's Node to be Ready", lambda: ready(cp, k), timeout=90)
        assert not tmp_key.exists()
        assert load_pair_file(str(k.pki / "kubelet-client-current.pem")).common_name == (
            f"system:node:{name}"
        )
    finally:
        k.stop()
        sim.stop()
        print(f"kubelet log: {k.log}")
