"""A real control plane for tests: etcd + kube-apiserver on 127.0.0.1, and on
request kube-controller-manager and kube-scheduler.

The Kubernetes binaries come from hack/build-control-plane.sh (built with Go
from k8s.io/kubernetes into ~/.cache/kubelet-py); etcd is Debian's
etcd-server. Authorization is Node,RBAC with the NodeRestriction admission
plugin, as on a real cluster, so a kubelet gets exactly a node's rights.

    python -m kubelet.testing.controlplane up --dir /tmp/cp [--controllers]   # Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from kubelet.testing.net import free_port
from kubelet.testing.pki import PKI, CertPair

K8S_VERSION = os.environ.get("K8S_VERSION", "v1.34.4")


class Unavailable(Exception):
    """A part of the control plane cannot run on this machine (reason in the message)."""


def cache_bin() -> str:
    base = os.environ.get("KUBELET_CACHE", os.path.expanduser("~/.cache/kubelet-py"))
    return os.path.join(base, f"k8s-{K8S_VERSION}", "bin")


# What a one-node e2e cluster needs from kube-controller-manager: service
# accounts and their tokens, the kube-root-ca.crt ConfigMap every projected
# token volume reads, namespace deletion, garbage collection, CSRs, and
# endpoints for the tests that create services, and node lifecycle (a kubelet
# registers tainted not-ready; this controller lifts the taint once it is Ready).
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "certificatesigningrequest-signing-controller",
    "certificatesigningrequest-approving-controller",
    "certificatesigningrequest-cleaner-controller",
    "clusterrole-aggregation-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "node-lifecycle-controller",
    # Re-creates a StatefulSet's pod that a kubelet rejected or evicted.
    "statefulset-controller",
)


# What storage tests add (CSI volumes, claims, attach): PV binding, the
# attach-detach controller (VolumeAttachments for drivers that require
# attach), generic ephemeral volumes, expansion, and the protection finalizers.
STORAGE_CONTROLLERS = (
    "persistentvolume-binder-controller",
    "persistentvolume-attach-detach-controller",
    "persistentvolume-expander-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "ephemeral-volume-controller",
)


def find_binaries(controllers: bool = False) -> dict[str, str]:
    found = {}
    names = ["kube-apiserver", "kubectl"]
    if controllers:
        names += ["kube-controller-manager", "kube-scheduler"]
    for name in names:
        path = os.path.join(cache_bin(), name)
        if not os.access(path, os.X_OK):
            raise Unavailable(f"{path} missing: run hack/build-control-plane.sh {name}")
        found[name] = path
    etcd = shutil.which("etcd")
    if not etcd:
        raise Unavailable("etcd not installed: apt-get install etcd-server")
    found["etcd"] = etcd
    return found


def write_kubeconfig(path: str, server: str, ca: str, client: CertPair, user: str) -> str:
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {client.cert}
    client-key: {client.key}
contexts:
- name: test
  context:
    cluster: test
    user: {user}
current-context: test
"""
    with open(path, "w") as fh:
        fh.write(text)
    return path


@dataclass
class ControlPlane:
    directory: str
    etcd_port: int = 0
    apiserver_port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    admin_kubeconfig: str = ""
    url: str = ""
    # Extra kube-apiserver flags (the density harness adds audit logging).
    extra_args: list[str] = field(default_factory=list)
    # Also run kube-controller-manager (CONTROLLERS) and kube-scheduler.
    controllers: bool = False
    # TLS bootstrapping as kubeadm sets it up: bootstrap token authentication,
    # one token (bootstrap_kubeconfig() writes a kubeconfig with it), the RBAC
    # bindings that let bootstrappers ask for node client certificates and get
    # them (and nodes renew theirs) approved automatically, and the
    # tokencleaner controller.
    bootstrap_tokens: bool = False
    # kube-controller-manager --cluster-signing-duration (e.g. "2m" for
    # rotation tests); empty keeps its default (a year).
    cluster_signing_duration: str = ""
    # The aggregation layer (front-proxy CA, --requestheader-* and proxy client
    # certificate), so an extension API server such as metrics-server can be
    # registered with an APIService (kubelet.testing.metrics_server).
    aggregation: bool = False
    # More kube-controller-manager controllers (e.g. STORAGE_CONTROLLERS).
    extra_controllers: tuple[str, ...] = ()

    def start(self, timeout: float = 90.0) -> ControlPlane:
        bins = find_binaries(self.controllers)
        os.makedirs(self.directory, exist_ok=True)
        self.pki = PKI(os.path.join(self.directory, "pki"))
        serving = self.pki.issue(
            "apiserver",
            "kube-apiserver",
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ips=["127.0.0.1", "10.0.0.1"],
            server=True,
            client=False,
        )
        admin = self.pki.issue("admin", "kubernetes-admin", ["system:masters"])
        # What the API server shows kubelets when it proxies logs (kubectl logs):
        # a client certificate the kubelets' client CA trusts, allowed by RBAC.
        kubelet_client = self.pki.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["system:masters"]
        )
        sa = self.pki.service_account_keys()
        self.etcd_port = self.etcd_port or free_port()
        self.apiserver_port = self.apiserver_port or free_port()
        logs = os.path.join(self.directory, "logs")
        os.makedirs(logs, exist_ok=True)
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._start_etcd(bins["etcd"], etcd_url, logs)
        self.url = f"https://127.0.0.1:{self.apiserver_port}"
        self._apiserver_argv = self._apiserver_args(
            bins["kube-apiserver"], etcd_url, serving, sa, kubelet_client
        )
        self._spawn(self._apiserver_argv, os.path.join(logs, "kube-apiserver.log"))
        self.admin_kubeconfig = write_kubeconfig(
            os.path.join(self.directory, "admin.kubeconfig"),
            self.url,
            self.pki.ca.cert,
            admin,
            "admin",
        )
        self._admin = admin
        self._wait_ready(timeout)
        if self.bootstrap_tokens:
            self._set_up_bootstrap_tokens()
        if self.controllers:
            self._start_controllers(bins, sa.key, logs)
        else:
            # No controller-manager runs here: create what its service-account
            # controller would, so pods can be admitted in "default".
            self.kubectl("create", "serviceaccount", "default", "-n", "default", check=False)
        return self

    def _start_etcd(self, etcd: str, etcd_url: str, logs: str) -> None:
        self._spawn(
            [
                etcd,
                "--name=test",
                f"--data-dir={os.path.join(self.directory, 'etcd')}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{free_port()}",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
            os.path.join(logs, "etcd.log"),
        )

    def _apiserver_args(
        self, binary: str, etcd_url: str, serving: CertPair, sa: CertPair, kubelet_client: CertPair
    ) -> list[str]:
        return [
            binary,
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca.cert}",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={kubelet_client.cert}",
            f"--kubelet-client-key={kubelet_client.key}",
            # Node names are not resolvable here: reach kubelets at their InternalIP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # Density tests create pods fast; the defaults throttle them.
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            f"--cert-dir={os.path.join(self.directory, 'apiserver-certs')}",
            *(["--enable-bootstrap-token-auth"] if self.bootstrap_tokens else []),
            *self._aggregation_args(),
            *self.extra_args,
        ]

    def _start_controllers(self, bins: dict[str, str], sa_key: str, logs: str) -> None:
        # Both run with the admin identity: this is a test cluster, and it
        # spares one certificate and RBAC binding per controller.
        kubeconfig = self.admin_kubeconfig
        self._spawn(
            [
                bins["kube-controller-manager"],
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--controllers={','.join(self._controller_names())}",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={self.pki.ca.cert}",
                f"--cluster-signing-cert-file={self.pki.ca.cert}",
                f"--cluster-signing-key-file={self.pki.ca.key}",
                "--use-service-account-credentials=false",
                *(
                    [f"--cluster-signing-duration={self.cluster_signing_duration}"]
                    if self.cluster_signing_duration
                    else []
                ),
            ],
            os.path.join(logs, "kube-controller-manager.log"),
        )
        self._spawn(
            [
                bins["kube-scheduler"],
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
            os.path.join(logs, "kube-scheduler.log"),
        )
        # Ready when the service-account controller has made "default" in
        # "default" (its token controller and the scheduler start alongside).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.check_alive()
            if (
                self.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", check=False
                ).returncode
                == 0
            ):
                return
            time.sleep(0.5)
        self.stop()
        raise Unavailable(
            f"kube-controller-manager made no default service account in 60s; logs in {logs}"
        )

    def _controller_names(self) -> tuple[str, ...]:
        extra = ("bootstrap-signer-controller", "token-cleaner-controller")
        names = CONTROLLERS + extra if self.bootstrap_tokens else CONTROLLERS
        return names + self.extra_controllers

    # The token every bootstrap kubeconfig carries: <id>.<secret>, as kubeadm makes them.
    BOOTSTRAP_TOKEN_ID = "abcdef"
    BOOTSTRAP_TOKEN_SECRET = "0123456789abcdef"

    def _set_up_bootstrap_tokens(self) -> None:
        tid, secret = self.BOOTSTRAP_TOKEN_ID, self.BOOTSTRAP_TOKEN_SECRET
        group = "system:bootstrappers:kubeadm:default-node-token"
        docs = f"""
apiVersion: v1
kind: Secret
metadata: {{name: bootstrap-token-{tid}, namespace: kube-system}}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: {tid}
  token-secret: {secret}
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: {group}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: kubeadm:kubelet-bootstrap}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-bootstrapper}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: kubeadm:node-autoapprove-bootstrap}}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:bootstrappers}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: kubeadm:node-autoapprove-certificate-rotation}}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:nodes}}]
"""
        path = os.path.join(self.directory, "bootstrap-tokens.yaml")
        with open(path, "w") as fh:
            fh.write(docs)
        # The RBAC bootstrap policy (the cluster roles above) appears shortly after /readyz.
        deadline = time.monotonic() + 30
        while True:
            r = self.kubectl("apply", "-f", path, check=False)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if r.returncode != 0:
            raise Unavailable(f"cannot set up bootstrap tokens: {r.stderr.strip()}")

    def bootstrap_kubeconfig(self, path: str) -> str:
        """A kubeconfig with only the bootstrap token (as kubeadm join writes)."""
        token = f"{self.BOOTSTRAP_TOKEN_ID}.{self.BOOTSTRAP_TOKEN_SECRET}"
        text = f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {self.url}
    certificate-authority: {self.pki.ca.cert}
users:
- name: tls-bootstrap-token-user
  user:
    token: {token}
contexts:
- name: tls-bootstrap-token-user@test
  context:
    cluster: test
    user: tls-bootstrap-token-user
current-context: tls-bootstrap-token-user@test
"""
        with open(path, "w") as fh:
            fh.write(text)
        return path

    def _aggregation_args(self) -> list[str]:
        if not self.aggregation:
            return []
        # Its own CA, as kubeadm does: a certificate from the client CA must not be
        # able to assert identities in the X-Remote-* headers.
        front = PKI(os.path.join(self.directory, "front-proxy-pki"))
        proxy_client = front.issue("front-proxy-client", "front-proxy-client")
        return [
            f"--requestheader-client-ca-file={front.ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={proxy_client.cert}",
            f"--proxy-client-key-file={proxy_client.key}",
        ]

    def check_alive(self) -> None:
        """Raise Unavailable naming the first process of ours that exited."""
        for p in self.procs:
            if p.poll() is not None:
                name = self.names.get(p.pid, "a control-plane process")
                self.stop()
                raise Unavailable(
                    f"{name} exited with {p.returncode}; logs in {self.directory}/logs"
                )

    def stop_apiserver(self) -> None:
        """Take the API server away (etcd keeps running), for outage tests."""
        for p in list(self.procs):
            if self.names.get(p.pid) == "kube-apiserver" and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                self.procs.remove(p)

    def start_apiserver(self, timeout: float = 90.0) -> None:
        """Bring the API server back on the same port with the same state."""
        log_path = os.path.join(self.directory, "logs", "kube-apiserver.log")
        self._spawn(self._apiserver_argv, log_path)
        self._wait_ready(timeout)

    def node_kubeconfig(self, node: str) -> str:
        pair = self.pki.issue(f"node-{node}", f"system:node:{node}", ["system:nodes"])
        return write_kubeconfig(
            os.path.join(self.directory, f"node-{node}.kubeconfig"),
            self.url,
            self.pki.ca.cert,
            pair,
            f"system:node:{node}",
        )

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def _spawn(self, argv: list[str], log_path: str) -> None:
        log = open(log_path, "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(proc)
        self.names[proc.pid] = os.path.basename(argv[0])

    def _wait_ready(self, timeout: float) -> None:
        ctx = ssl.create_default_context(cafile=self.pki.ca.cert)
        ctx.load_cert_chain(self._admin.cert, self._admin.key)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    self.stop()
                    name = self.names.get(p.pid, "a control-plane process")
                    raise Unavailable(
                        f"{name} exited with {p.returncode}; logs in {self.directory}/logs"
                    )
            try:
                with urllib.request.urlopen(self.url + "/readyz", context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception as err:  # not ready yet, whatever the reason: poll again
                last = str(err)
            time.sleep(0.5)
        self.stop()
        raise Unavailable(f"kube-apiserver not ready after {timeout}s: {last}")

    def stop(self) -> None:
        # Only the processes this harness started, newest first.
        for p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubelet.testing.controlplane")
    ap.add_argument("command", choices=["up"])
    ap.add_argument("--dir", default="/tmp/kubelet-py-controlplane")
    ap.add_argument("--port", type=int, default=6443)
    ap.add_argument(
        "--controllers",
        action="store_true",
        help="also run kube-controller-manager and kube-scheduler",
    )
    ap.add_argument(
        "--node",
        action="append",
        default=[],
        help="write a kubeconfig for this node (system:node:<name>); repeatable",
    )
    ap.add_argument(
        "--bootstrap-tokens",
        action="store_true",
        help="TLS bootstrapping as kubeadm sets it up; writes <dir>/bootstrap.kubeconfig",
    )
    ap.add_argument(
        "--cluster-signing-duration",
        default="",
        help="kube-controller-manager --cluster-signing-duration (e.g. 2m to watch rotation)",
    )
    args = ap.parse_args(argv)
    # Block the stop signals so sigwait() receives them and the cleanup runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        cp = ControlPlane(
            args.dir,
            apiserver_port=args.port,
            controllers=args.controllers,
            bootstrap_tokens=args.bootstrap_tokens,
            cluster_signing_duration=args.cluster_signing_duration,
        ).start()
    except Unavailable as err:
        print(f"control plane unavailable: {err}", file=sys.stderr)
        return 1
    print(f"kube-apiserver ready at {cp.url}")
    print(f"admin kubeconfig: {cp.admin_kubeconfig}")
    for node in args.node:
        print(f"kubeconfig for node {node}: {cp.node_kubeconfig(node)}")
    if args.bootstrap_tokens:
        path = cp.bootstrap_kubeconfig(os.path.join(args.dir, "bootstrap.kubeconfig"))
        print(f"bootstrap kubeconfig: {path}")
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})  # blocked above, so this returns
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
