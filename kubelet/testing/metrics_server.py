"""metrics-server (sigs.k8s.io/metrics-server, built by hack/parts/metrics-server.sh)
as a local process, registered as the APIService v1beta1.metrics.k8s.io of a
ControlPlane started with aggregation=True, so `kubectl top` works against our
kubelets.

There is no service network here, so the APIService points at an ExternalName
Service naming localhost: the aggregator's default (cluster IP) resolver sends
ExternalName services to <name>:<port>. The --enable-aggregator-routing
alternative resolves EndpointSlices, whose validation refuses loopback
addresses, so it cannot reach a process on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from kubelet.testing.controlplane import ControlPlane, Unavailable
from kubelet.testing.net import free_port
from kubelet.testing.process import stop_process

VERSION = "v0.8.0"


def metrics_server_bin() -> str:
    base = os.environ.get("KUBELET_CACHE", os.path.expanduser("~/.cache/kubelet-py"))
    return os.path.join(base, f"metrics-server-{VERSION}", "metrics-server")


APISERVICE = """
apiVersion: v1
kind: Service
metadata: {{name: metrics-server, namespace: kube-system}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: https, port: {port}, targetPort: {port}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.metrics.k8s.io}}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {{name: metrics-server, namespace: kube-system, port: {port}}}
  # metrics-server serves a self-signed certificate of its own.
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"""


class MetricsServer:
    def __init__(self, cp: ControlPlane, resolution: str = "10s") -> None:
        if not cp.aggregation:
            raise ValueError("the control plane needs aggregation=True for an APIService")
        self.cp = cp
        self.resolution = resolution
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = os.path.join(cp.directory, "logs", "metrics-server.log")

    def start(self, timeout: float = 60.0) -> MetricsServer:
        binary = metrics_server_bin()
        if not os.access(binary, os.X_OK):
            raise Unavailable(f"{binary} missing: run hack/parts/metrics-server.sh")
        self.port = free_port()
        kubeconfig = self.cp.admin_kubeconfig
        argv = [
            binary,
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={os.path.join(self.cp.directory, 'metrics-server-certs')}",
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # Our kubelets serve self-signed certificates (serverTLSBootstrap off).
            "--kubelet-insecure-tls",
            "--kubelet-preferred-address-types=InternalIP",
            "--kubelet-use-node-status-port",
            f"--metric-resolution={self.resolution}",
            # It must stay below the resolution (10 s, the minimum).
            "--kubelet-request-timeout=5s",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        manifest = os.path.join(self.cp.directory, "metrics-server.yaml")
        with open(manifest, "w") as fh:
            fh.write(APISERVICE.format(port=self.port))
        applied = self.cp.kubectl("apply", "-f", manifest, check=False)
        if applied.returncode != 0:
            self.stop()
            raise Unavailable(f"registering the APIService failed: {applied.stderr.strip()}")
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(
                    f"metrics-server exited with {self.proc.returncode}; log {self.log}"
                )
            r = self.cp.kubectl(
                "get", "apiservice", "v1beta1.metrics.k8s.io",
                "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}",
                check=False,
            )  # fmt: skip
            if r.stdout.strip() == "True":
                return self
            last = r.stdout + r.stderr
            time.sleep(1)
        self.stop()
        raise Unavailable(f"APIService v1beta1.metrics.k8s.io not Available in {timeout}s: {last}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        with contextlib.suppress(Exception):
            self.cp.kubectl("delete", "apiservice", "v1beta1.metrics.k8s.io", check=False)
