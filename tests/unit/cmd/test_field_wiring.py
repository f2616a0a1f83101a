"""Config fields reach the part that acts on them, from the command line and
file through the real composition (each part's behaviour has its own tests)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kubelet.cmd.kubelet import build_server
from kubelet.cmd.node import build_cri, node_inputs
from kubelet.cmd.run import build_clients
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.dependencies import Dependencies
from kubelet.kubelet import Kubelet
from kubelet.nodestatus.setters import compute_status, initial_node

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
  name: k
contexts:
- context: {cluster: k, user: u}
  name: k
current-context: k
users:
- name: u
  user: {token: t}
"""


async def test_api_client_rate_limits(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "kubeAPIQPS: 7\nkubeAPIBurst: 9\neventRecordQPS: 3\neventBurst: 4\n"
    )
    s, _, _ = build_server([f"--kubeconfig={kc}", f"--config={cfg}", "--kube-api-burst=11"])
    assert s is not None
    deps = Dependencies()
    build_clients(s, deps)
    try:
        assert deps.kube_client is not None and deps.event_client is not None
        assert (deps.kube_client.limiter.qps, deps.kube_client.limiter.burst) == (7, 11)
        assert (deps.event_client.limiter.qps, deps.event_client.limiter.burst) == (3, 4)
    finally:
        for c in (deps.kube_client, deps.event_client, deps.heartbeat_client):
            if c is not None:
                await c.close()


async def test_cri_endpoints_and_request_timeout(tmp_path: Path) -> None:
    s, _, _ = build_server(
        [
            f"--container-runtime-endpoint=unix://{tmp_path}/rt.sock",
            f"--image-service-endpoint=unix://{tmp_path}/img.sock",
            "--runtime-request-timeout=7s",
        ]
    )
    assert s is not None
    runtime, images = build_cri(s, Dependencies())
    assert (runtime.endpoint, runtime.timeout) == (f"unix://{tmp_path}/rt.sock", 7.0)  # type: ignore[attr-defined]
    assert (images.endpoint, images.timeout) == (f"unix://{tmp_path}/img.sock", 7.0)  # type: ignore[attr-defined]


def test_node_provider_id_and_image_cap() -> None:
    s, _, _ = build_server(["--provider-id=kind://docker/kind/n1", "--node-status-max-images=2"])
    assert s is not None
    inp = node_inputs(s, "n1")
    assert initial_node(inp)["spec"]["providerID"] == "kind://docker/kind/n1"
    many = [{"names": [f"img{i}"], "sizeBytes": i} for i in range(5)]
    status = compute_status(dataclasses.replace(inp, images=lambda: many), None)
    assert len(status["images"]) == 2


def test_kube_proxy_version_follows_disable_node_kube_proxy_version() -> None:
    for flags, want in (([], ""), (["--feature-gates=DisableNodeKubeProxyVersion=false"], "v1")):
        s, _, _ = build_server(flags)
        assert s is not None
        info = compute_status(node_inputs(s, "n1"), None)["nodeInfo"]
        assert info["kubeProxyVersion"][:2] == want
        assert not want or info["kubeProxyVersion"] == info["kubeletVersion"]


def test_kubelet_periods_from_the_config(tmp_path: Path) -> None:
    s, _, _ = build_server(["--sync-frequency=30s", "--cpu-cfs-quota-period=50ms"])
    assert s is not None
    k = Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    assert k.pod_workers.resync_interval == 30
    assert k.host.sync_frequency == 30
    assert k.pod_cgroups is not None and k.pod_cgroups.cpu_period == 50_000


async def test_manifest_url_source_from_the_config(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import kubelet.kubelet as kubelet_mod

    made: list[tuple[object, ...]] = []

    class Recorded:
        def __init__(self, *args: object) -> None:
            made.append(args)

        async def run(self, stop: object) -> None:
            return None

    monkeypatch.setattr(kubelet_mod, "HTTPSource", Recorded)
    s, _, _ = build_server(
        [
            "--manifest-url=http://127.0.0.1:1/pods",
            "--manifest-url-header=a:1,b:2",
            "--manifest-url-header=a:3",
            "--http-check-frequency=7s",
        ]
    )
    assert s is not None
    k = Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    k._start_sources()
    for t in k._tasks:
        await t
    url, headers, node, period, _, prevent_refs = made[0]
    assert (url, headers, node, period, prevent_refs) == (
        "http://127.0.0.1:1/pods",
        {"a": ["1", "3"], "b": ["2"]},
        "n1",
        7.0,
        True,  # PreventStaticPodAPIReferences, on by default
    )


def test_memory_swap_and_psi_gate_reach_the_runtime_and_stats(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "failSwapOn: false\nmemorySwap:\n  swapBehavior: NoSwap\n"
        "featureGates:\n  KubeletPSI: false\n  UserNamespacesSupport: false\n"
    )
    s, _, _ = build_server([f"--config={cfg}"])
    assert s is not None
    k = Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    swap = k.runtime_manager.node.swap
    assert swap is not None and swap.behavior == "NoSwap"
    assert swap.cgroup_v2 == (k.stats.version == 2)
    assert not k.stats.psi and "cpu_pressure" not in k.stats.summary_fields
    assert not k.runtime_manager.node.user_namespaces_support
    # The defaults: KubeletPSI and UserNamespacesSupport are on in v1.34.
    s, _, _ = build_server([])
    assert s is not None
    k = Kubelet(s.config, "n2", str(tmp_path / "2"), FakeRuntimeService(), FakeImageService())
    assert k.stats.psi and k.runtime_manager.node.user_namespaces_support
    assert k.runtime_manager.node.swap is not None and k.runtime_manager.node.swap.behavior == ""
