"""The resource managers' metrics (CPU, memory and topology managers), by
upstream's names, labels and buckets (pkg/kubelet/metrics), in the kubelet's
registry; apart from kubelet/metrics.py only to keep modules small."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kubelet.metrics import DEF_BUCKETS, REGISTRY

# The resource managers (cm/cpumanager, cm/memorymanager, cm/topologymanager).
CPU_MANAGER_PINNING_REQUESTS = Counter(
    "kubelet_cpu_manager_pinning_requests_total",
    "The number of cpu core allocations which required pinning.",
    registry=REGISTRY,
)
CPU_MANAGER_PINNING_ERRORS = Counter(
    "kubelet_cpu_manager_pinning_errors_total",
    "The number of cpu core allocations which required pinning failed.",
    registry=REGISTRY,
)
CPU_MANAGER_SHARED_POOL_MILLICORES = Gauge(
    "kubelet_cpu_manager_shared_pool_size_millicores",
    "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
    registry=REGISTRY,
)
CPU_MANAGER_EXCLUSIVE_CPUS = Gauge(
    "kubelet_cpu_manager_exclusive_cpu_allocation_count",
    "The total number of CPUs exclusively allocated to containers running on this node",
    registry=REGISTRY,
)
CPU_MANAGER_ALLOCATION_PER_NUMA = Gauge(
    "kubelet_cpu_manager_allocation_per_numa",
    "Number of CPUs allocated per NUMA node",
    ["numa_node"],
    registry=REGISTRY,
)
MEMORY_MANAGER_PINNING_REQUESTS = Counter(
    "kubelet_memory_manager_pinning_requests_total",
    "The number of memory pages allocations which required pinning.",
    registry=REGISTRY,
)
MEMORY_MANAGER_PINNING_ERRORS = Counter(
    "kubelet_memory_manager_pinning_errors_total",
    "The number of memory pages allocations which required pinning that failed.",
    registry=REGISTRY,
)
TOPOLOGY_MANAGER_ADMISSION_REQUESTS = Counter(
    "kubelet_topology_manager_admission_requests_total",
    "The number of admission requests where resources have to be aligned.",
    registry=REGISTRY,
)
TOPOLOGY_MANAGER_ADMISSION_ERRORS = Counter(
    "kubelet_topology_manager_admission_errors_total",
    "The number of admission request failures where resources could not be aligned.",
    registry=REGISTRY,
)
TOPOLOGY_MANAGER_ADMISSION_DURATION = Histogram(
    "kubelet_topology_manager_admission_duration_ms",
    "Duration in milliseconds to serve a pod admission request.",
    buckets=tuple(0.05 * 2**i for i in range(15)),  # ExponentialBuckets(.05, 2, 15)
    registry=REGISTRY,
)

# Every Create, Update and Destroy of the cgroup manager (pod, QoS and node
# allocatable cgroups alike), failed ones included, as upstream times them.
CGROUP_MANAGER_DURATION = Histogram(
    "kubelet_cgroup_manager_duration_seconds",
    "Seconds of one cgroup manager operation (create, update, destroy) on a cgroup.",
    ["operation_type"],
    buckets=DEF_BUCKETS,
    registry=REGISTRY,
)
CGROUP_CREATE = CGROUP_MANAGER_DURATION.labels("create")
CGROUP_UPDATE = CGROUP_MANAGER_DURATION.labels("update")
CGROUP_DESTROY = CGROUP_MANAGER_DURATION.labels("destroy")

# container_aligned_compute_resources_count: the scope label's values, and the
# boundary's (numa_node, physical_cpu, uncore_cache).
ALIGN_SCOPE_POD = "pod"
ALIGN_SCOPE_CONTAINER = "container"
ALIGNED_NUMA_NODE = "numa_node"
ALIGNED_PHYSICAL_CPU = "physical_cpu"
ALIGNED_UNCORE_CACHE = "uncore_cache"


class LabelledCounter(Collector):
    """A Go CounterVec whose name does not end in _total: this client library
    would add the suffix to a Counter's samples and TYPE line, so the series are
    written with upstream's names, typed untyped (as POD_RESOURCES). A series
    exists once inc() or touch() named it, as WithLabelValues does."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *label_values: str) -> None:
        self.values[label_values] = self.values.get(label_values, 0.0) + 1

    def touch(self, *label_values: str) -> None:
        self.values.setdefault(label_values, 0.0)

    def value(self, *label_values: str) -> float:
        return self.values.get(label_values, 0.0)

    def collect(self) -> Iterator[Metric]:
        m = Metric(self.name, self.documentation, "unknown")
        for key, n in sorted(self.values.items()):
            m.add_sample(self.name, dict(zip(self.labels, key, strict=True)), n)
        if m.samples:
            yield m

    def describe(self) -> Iterator[Metric]:
        return iter(())


CONTAINER_ALIGNED_COMPUTE_RESOURCES = LabelledCounter(
    "kubelet_container_aligned_compute_resources_count",
    "Cumulative number of aligned compute resources allocated to containers by alignment type.",
    ("scope", "boundary"),
)
CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE = LabelledCounter(
    "kubelet_container_aligned_compute_resources_failure_count",
    "Cumulative number of failures to allocate aligned compute resources to containers by "
    "alignment type.",
    ("scope", "boundary"),
)
REGISTRY.register(CONTAINER_ALIGNED_COMPUTE_RESOURCES)
REGISTRY.register(CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE)
