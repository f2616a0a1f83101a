"""What a container gets from the pod's world (kubelet_pods.go): its
environment, its mounts, the pod's DNS settings and hostname. This is the
kubelet's RuntimeHelper: kuberuntime asks it while building sandbox and
container configs.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from kubelet.container.runtime import DNSSettings, RunContainerOptions
from kubelet.types import Pod, host_network, name

log = logging.getLogger(__name__)


class PodRuntimeHelper:
    def __init__(self, root_dir: str, resolv_conf: str) -> None:
        self.root_dir = root_dir
        self.resolv_conf = resolv_conf

    def get_pod_dir(self, pod_uid: str) -> str:
        return os.path.join(self.root_dir, "pods", pod_uid)

    async def generate_run_container_options(
        self, pod: Pod, container: dict[str, Any], pod_ips: list[str]
    ) -> RunContainerOptions:
        envs = [
            (e["name"], str(e.get("value", "")))
            for e in container.get("env") or []
            if "valueFrom" not in e  # named by the pod's UnsupportedPodFields event
        ]
        hostname, _ = self.generate_pod_hostname_and_domain(pod)
        return RunContainerOptions(envs=envs, hostname=hostname)

    def generate_pod_hostname_and_domain(self, pod: Pod) -> tuple[str, str]:
        # Host-network sandboxes get an empty hostname: the runtime then uses the
        # node's, which is what they share anyway.
        if host_network(pod):
            return "", ""
        return (pod["spec"].get("hostname") or name(pod))[:63], ""

    def get_pod_dns(self, pod: Pod) -> DNSSettings:
        cfg = pod["spec"].get("dnsConfig") or {}
        out = DNSSettings()
        if pod["spec"].get("dnsPolicy", "ClusterFirst") != "None":
            try:
                with open(self.resolv_conf) as fh:
                    for line in fh:
                        parts = line.split()
                        if not parts or parts[0].startswith("#"):
                            continue
                        if parts[0] == "nameserver" and len(parts) > 1:
                            out.servers.append(parts[1])
                        elif parts[0] == "search":
                            out.searches = parts[1:]
                        elif parts[0] == "options":
                            out.options = parts[1:]
            except OSError:
                pass
        out.servers += cfg.get("nameservers") or []
        out.searches += cfg.get("searches") or []
        out.options += [
            o["name"] + (f":{o['value']}" if o.get("value") else "")
            for o in cfg.get("options") or []
        ]
        return out
