"""The kubelet's Prometheus metrics, with the upstream names and buckets.

One registry for the process; the servers expose it on /metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)


class AsyncioTasksCollector(Collector):
    """kubelet_asyncio_tasks: tasks alive on the event loop that serves /metrics
    (this kubelet's only loop); a per-pod task left behind shows as a rising line.
    Read from any other thread there is no running loop and nothing is reported."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        yield GaugeMetricFamily(
            "kubelet_asyncio_tasks",
            "Number of asyncio tasks not yet done on the kubelet's event loop.",
            value=len(asyncio.all_tasks(loop)),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


REGISTRY.register(AsyncioTasksCollector())

_optional: set[int] = set()


def register_once(*collectors: Collector) -> None:
    """Collectors that upstream registers only once their feature is in use
    (credential provider plugins, graceful shutdown): registered at the first call."""
    for c in collectors:
        if id(c) not in _optional:
            REGISTRY.register(c)
            _optional.add(id(c))


# metrics.DefBuckets and the kubelet's exponential buckets.
_DEF = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_RUNTIME_OP = tuple(0.005 * 2.5**i for i in range(14))  # ExponentialBuckets(.005, 2.5, 14)
_POD_START = (
    0.5,
    1,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    20,
    30,
    45,
    60,
    120,
    180,
    240,
    300,
    360,
    480,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
)

# Finer than upstream's DefBuckets at the low end: relists here take milliseconds.
_RELIST: tuple[float, ...] = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
)
_RELIST += (0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PLEG_RELIST_DURATION = Histogram(
    "kubelet_pleg_relist_duration_seconds",
    "Duration in seconds for relisting pods in PLEG.",
    buckets=_RELIST,
    registry=REGISTRY,
)
PLEG_RELIST_INTERVAL = Histogram(
    "kubelet_pleg_relist_interval_seconds",
    "Interval in seconds between relisting in PLEG.",
    buckets=(0.001, 0.0025, *_DEF),
    registry=REGISTRY,
)
PLEG_LAST_SEEN = Gauge(
    "kubelet_pleg_last_seen_seconds",
    "Timestamp in seconds when PLEG was last seen active.",
    registry=REGISTRY,
)
RUNNING_PODS = Gauge(
    "kubelet_running_pods", "Number of pods that have a running pod sandbox", registry=REGISTRY
)
RUNNING_CONTAINERS = Gauge(
    "kubelet_running_containers",
    "Number of containers currently running",
    ["container_state"],
    registry=REGISTRY,
)
POD_WORKER_DURATION = Histogram(
    "kubelet_pod_worker_duration_seconds",
    "Duration in seconds to sync a single pod. "
    "Broken down by operation type: create, update, or sync",
    ["operation_type"],
    buckets=_DEF,
    registry=REGISTRY,
)
POD_START_DURATION = Histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    buckets=_POD_START,
    registry=REGISTRY,
)
RUNTIME_OPERATIONS = Counter(
    "kubelet_runtime_operations",
    "Cumulative number of runtime operations by operation type.",
    ["operation_type"],
    registry=REGISTRY,
)
RUNTIME_OPERATIONS_DURATION = Histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations. Broken down by operation type.",
    ["operation_type"],
    buckets=_RUNTIME_OP,
    registry=REGISTRY,
)
RUNTIME_OPERATIONS_ERRORS = Counter(
    "kubelet_runtime_operations_errors",
    "Cumulative number of runtime operation errors by operation type.",
    ["operation_type"],
    registry=REGISTRY,
)
STARTED_CONTAINERS_ERRORS = Counter(
    "kubelet_started_containers_errors",
    "Cumulative number of errors when starting containers",
    ["code", "container_type"],
    registry=REGISTRY,
)

# /metrics/probes: one series per container probe, as upstream (dropped when the
# pod's probe workers stop, so removed pods leave nothing behind).
PROBER_REGISTRY = CollectorRegistry(auto_describe=True)
PROBER_PROBE_TOTAL = Counter(
    "prober_probe_total",
    "Cumulative number of a liveness, readiness or startup probe for a container by result.",
    ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
    registry=PROBER_REGISTRY,
)
