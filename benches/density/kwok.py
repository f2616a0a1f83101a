"""kwok as the density harness's third "kubelet": the ceiling.

kwok (sigs.k8s.io/kwok, built by hack/bench-parts/kwok.sh) manages one Node object and
the pods bound to it with no runtime at all: its Stages mark a pod Running in one
status write as soon as it sees it. Its time to all Running for N pods is what the
API server and etcd on this machine allow; the ratios ours/kwok and upstream/kwok
say how close each kubelet comes to that.

kwok does not create its Node: the run creates one with a pod CIDR large enough
for N pod IPs, and kwok (--manage-single-node) initializes and heartbeats it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

KWOK_VERSION = os.environ.get("KWOK_VERSION", "v0.8.0")
# One pod IP per pod from the node's podCIDR: room for 65,534.
POD_CIDR = "10.128.0.0/16"


def kwok_dir() -> Path:
    cache = Path(os.environ.get("KUBELET_CACHE", Path.home() / ".cache/kubelet-py"))
    return cache / f"kwok-{KWOK_VERSION}"


def kwok_binary() -> str | None:
    path = kwok_dir() / "kwok"
    return str(path) if path.exists() and (kwok_dir() / "stages").is_dir() else None


def node_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]},
    }


def write_config(path: Path) -> Path:
    """kwok's configuration: its options, then the Stages of the module it was
    built from (hack/bench-parts/kwok.sh copied them next to the binary)."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            # kwok does not default options read from a file (a zero
            # parallelism is refused): its own defaults, written out.
            "options": {
                "cidr": POD_CIDR,
                "nodeIP": "127.0.0.1",
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
            },
        }
    ]
    for stage in sorted((kwok_dir() / "stages").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(stage.read_text()) if d]
    path.write_text(yaml.safe_dump_all(docs))
    return path


def start(run_dir: Path, kubeconfig: str, node: str, port: int) -> subprocess.Popen[bytes]:
    binary = kwok_binary()
    if binary is None:
        raise RuntimeError("kwok not built (hack/bench-parts/kwok.sh)")
    config = write_config(run_dir / "kwok.yaml")
    argv = [
        binary, f"--kubeconfig={kubeconfig}", f"--config={config}",
        f"--manage-single-node={node}", "--manage-all-nodes=false",
        f"--server-address=127.0.0.1:{port}", "--v=INFO",
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=open(run_dir / "kwok.log", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def ceiling_ratios(results: list[Any]) -> list[dict[str, Any]]:
    """Per template and N: each kubelet's startup figures over kwok's in the same run."""
    out = []
    for r in results:
        if r.kubelet == "kwok" or r.error:
            continue
        base = next((k for k in results if k.kubelet == "kwok" and not k.error
                     and k.n == r.n and k.template == r.template), None)  # fmt: skip
        if base is None:
            continue

        def ratio(a: float | None, b: float | None) -> float | None:
            return None if a is None or not b else round(a / b, 3)

        out.append({
            "kubelet": r.kubelet, "relist_ms": int(r.relist_period_s * 1000), "n": r.n,
            "template": r.template,
            "all_running_over_kwok": ratio(r.all_running_s, base.all_running_s),
            "startup_p50_over_kwok": ratio(r.startup_p50_s, base.startup_p50_s),
            "startup_p99_over_kwok": ratio(r.startup_p99_s, base.startup_p99_s),
            "kwok_all_running_s": base.all_running_s, "kwok_startup_p99_s": base.startup_p99_s,
        })  # fmt: skip
    return out
