"""Our /metrics against the upstream kubelet's (v1.34.4): the same names, types,
label names and buckets, or listed in docs/metrics.md as not served, and nothing
listed there served after all. The upstream side is a fixture from a real scrape
(see its "source"); the density harness does the same against a live one."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase

import kubelet.certificate.metrics
import kubelet.client.metrics
import kubelet.cm.dra.metrics
import kubelet.cm.metrics
import kubelet.images.metrics
import kubelet.lifecycle.metrics
import kubelet.pleg.metrics
import kubelet.server.httpmetrics
import kubelet.volume.metrics
import kubelet.volumemanager.metrics  # noqa: F401 (each registers its families)
from benches import metric_parity as mp
from kubelet import metrics
from kubelet.features import FeatureGate
from kubelet.nodeshutdown.manager import register_metrics
from kubelet.stats.logs import ContainerLogStats, ContainerLogUsage
from kubelet.stats.volumes import VolumeStatsCollector
from kubelet.volume.metrics import VolumeUsage

FIXTURE = Path(__file__).parents[2] / "fixtures/metrics/upstream-kubelet-v1.34.4.json"


def ours() -> dict[str, mp.Family]:
    """Every family our registry serves, with label names even where no series
    exists yet (read from the metric objects), plus the scrape-time collector."""
    register_metrics(FeatureGate())  # as the kubelet's start-up does with default gates
    fams = mp.families(generate_latest(metrics.REGISTRY).decode())
    node = metrics.NodeInfo("n", 1, "v1.34.4", FeatureGate().metric_rows())
    extra = CollectorRegistry()
    extra.register(metrics.KubeletStateCollector(lambda: metrics.PodCounts(), node))
    # Volume stats exist per claim only: one claim with a health condition.
    claim = VolumeUsage("v", 1, 1, 10, 9, 100, 99, pvc_ref=("ns", "c"), abnormal=False)
    extra.register(VolumeStatsCollector(lambda: {("ns", "c"): claim}))
    # Container log usage exists once a pass measured a container.
    logs = ContainerLogStats(lambda: [], "", 60)
    logs._usage = {"u": [ContainerLogUsage("u", "ns", "p", "c", 1)]}  # test-only: a pass's result
    extra.register(logs)
    fams |= mp.families(generate_latest(extra).decode())
    for collector in list(metrics.REGISTRY._collector_to_names):  # test-only internals
        if isinstance(collector, MetricWrapperBase):
            name = mp.exposition_name(collector._name, collector._type)
            if name in fams and fams[name].labels is None:
                fams[name].labels = sorted(collector._labelnames)
    return fams


def test_every_upstream_family_is_served_alike_or_listed() -> None:
    report = mp.compare(ours(), mp.load_fixture(FIXTURE), mp.not_served())
    assert report.missing == []
    assert report.listed_but_served == []
    assert report.type_differs == {}
    assert report.labels_differ == {}
    assert report.buckets_missing == {}
    # the list, by name
    for name in (
        "kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_duration_seconds",
        "kubelet_pleg_relist_duration_seconds", "kubelet_pleg_relist_interval_seconds",
        "kubelet_pleg_last_seen_seconds", "kubelet_pod_worker_duration_seconds",
        "kubelet_runtime_operations_duration_seconds", "kubelet_runtime_operations_total",
        "kubelet_runtime_operations_errors_total", "kubelet_running_pods",
        "kubelet_running_containers", "kubelet_evictions_total",
        "kubelet_http_requests_total", "kubelet_http_requests_duration_seconds",
        "kubelet_http_inflight_requests", "storage_operation_duration_seconds",
        "kubelet_restarted_pods_total", "kubelet_working_pods",
        "kubelet_node_startup_pre_kubelet_duration_seconds",
        "kubelet_node_startup_pre_registration_duration_seconds",
        "kubelet_node_startup_registration_duration_seconds",
        "kubelet_node_startup_post_registration_duration_seconds",
        "kubelet_node_startup_duration_seconds",
    ):  # fmt: skip
        assert name in report.served, name


def test_the_comparison_sees_a_difference() -> None:
    up = mp.load_fixture(FIXTURE)
    mine = ours()
    mine["kubelet_evictions_total"] = mp.Family("counter", ["signal"])
    del mine["kubelet_running_pods"]
    mine["kubelet_pod_worker_duration_seconds"].buckets = [0.005, 0.01]
    report = mp.compare(mine, up, mp.not_served())
    assert report.labels_differ["kubelet_evictions_total"] == [["signal"], ["eviction_signal"]]
    assert "kubelet_running_pods" in report.missing
    assert 0.025 in report.buckets_missing["kubelet_pod_worker_duration_seconds"]
    assert not report.ok
