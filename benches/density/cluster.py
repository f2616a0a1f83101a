"""The control plane a density run joins, how the node's requests are counted
from its audit log, and the configuration both kubelets run with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from benches.density.spec import Spec
from kubelet.testing.controlplane import ControlPlane


def audit_policy(path: Path) -> None:
    """Log one line per request made by a node, nothing else."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived", "ResponseStarted"],
                "rules": [
                    {"level": "Metadata", "userGroups": ["system:nodes"]},
                    {"level": "None"},
                ],
            }
        )
    )


def start_control_plane(
    workdir: Path, controllers: bool = False, extra_controllers: tuple[str, ...] = ()
) -> ControlPlane:
    policy = workdir / "audit-policy.yaml"
    audit_policy(policy)
    cp = ControlPlane(
        str(workdir / "cp"),
        controllers=controllers,
        extra_controllers=extra_controllers,
        extra_args=[
            f"--audit-policy-file={policy}",
            f"--audit-log-path={workdir / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-maxsize=0",
            # One worker (the default) deletes a 10,000-pod collection one by one
            # and the request times out (504) long before the end.
            "--delete-collection-workers=16",
        ],
    )
    return cp.start()


def count_requests(audit_log: Path, user: str) -> tuple[int, dict[str, int]]:
    """Requests made by `user`, in all and by "verb resource[/subresource]"."""
    n = 0
    kinds: dict[str, int] = {}
    needle = f'"username":"{user}"'
    with open(audit_log, errors="replace") as fh:
        for line in fh:
            if needle not in line:
                continue
            n += 1
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ref = ev.get("objectRef") or {}
            res = ref.get("resource") or ev.get("requestURI", "?").split("?")[0]
            if ref.get("subresource"):
                res += "/" + ref["subresource"]
            key = f"{ev.get('verb', '?')} {res}"
            kinds[key] = kinds.get(key, 0) + 1
    return n, dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def upstream_kubelet() -> str | None:
    cache = Path(os.environ.get("KUBELET_CACHE", Path.home() / ".cache/kubelet-py"))
    version = os.environ.get("K8S_VERSION", "v1.34.4")
    path = cache / f"k8s-{version}" / "bin" / "kubelet"
    return str(path) if path.exists() else None


def kubelet_config(spec: Spec, cgroup_root: str = "", logs_dir: str = "") -> dict[str, Any]:
    """The configuration both kubelets run with (the launcher adds the ports)."""
    cfg: dict[str, Any] = {
        "maxPods": spec.n + 20,
        "address": "127.0.0.1",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "kubeAPIQPS": spec.qps,
        "kubeAPIBurst": spec.burst,
        "serializeImagePulls": False,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "evictionHard": {"memory.available": "100Mi"},
        "resolvConf": "",
        # As every real cluster (kubeadm's defaults): without them each sandbox
        # draws two MissingClusterDNS warnings, from both kubelets.
        "clusterDNS": ["10.0.0.10"],
        "clusterDomain": "cluster.local",
    }
    if logs_dir:
        # Pod logs (and what the legacy links point at) stay in the run's dir:
        # upstream's default, /var/log/pods, outlives the run.
        cfg["podLogsDir"] = logs_dir
    if spec.kubelet == "ours":
        cfg["plegRelistPeriod"] = f"{int(spec.relist * 1000)}ms"
    if spec.evented:
        cfg["featureGates"] = {"EventedPLEG": True}
    if spec.runtime == "containerd":
        # As a real node: QoS and pod cgroups kept by the kubelet, under a root
        # of the run's own (cgroupfs, as the private containerd's runc).
        cfg["cgroupsPerQOS"] = True
        cfg["cgroupRoot"] = "/" + cgroup_root
        # The images cannot be pulled again here: never collect them; and a busy
        # shared disk must not evict the pods.
        cfg["imageGCHighThresholdPercent"] = 100
        cfg["imageGCLowThresholdPercent"] = 99
        cfg["evictionHard"] = {"memory.available": "100Mi", "nodefs.available": "1%",
                               "imagefs.available": "1%", "nodefs.inodesFree": "1%"}  # fmt: skip
    return cfg
