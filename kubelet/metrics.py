"""The kubelet's Prometheus metrics, with the upstream names, labels and buckets
(pkg/kubelet/metrics of the Go kubelet), so dashboards, alerts and clusterloader2
measurements written for it read this one unchanged. docs/metrics.md lists what
upstream serves that this kubelet does not (yet), and where a histogram has more
buckets than upstream's (a superset: upstream's bounds are all there).

One registry for the process; the servers expose it on /metrics. Upstream's
client library writes no `_created` series: neither does this one.
"""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubelet.core_v1 import PodSpec
from kubelet.types import ContainerKind, containers_of

disable_created_metrics()
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


@dataclass(frozen=True)
class PodCounts:
    """What the kubelet holds, counted when /metrics is read (upstream sets these
    in its housekeeping; a scrape every 15 s costs less than a count every 2 s)."""

    desired: int = 0  # pods from the API server
    desired_static: int = 0  # pods from files and URLs
    active: int = 0
    active_static: int = 0
    mirrors: int = 0


@dataclass(frozen=True)
class NodeInfo:
    node_name: str
    cgroup_version: int
    kubernetes_version: str  # the release this kubelet follows, e.g. v1.34.4
    features: list[tuple[str, str, bool]]  # (gate, stage, enabled)


_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class KubeletStateCollector(Collector):
    """kubelet_desired_pods, kubelet_active_pods, kubelet_mirror_pods,
    kubelet_node_name, kubelet_cgroup_version, kubernetes_build_info and
    kubernetes_feature_enabled, by upstream's names and labels."""

    def __init__(self, counts: Callable[[], PodCounts], node: NodeInfo) -> None:
        self.counts = counts
        self.node = node

    def collect(self) -> Iterator[GaugeMetricFamily]:
        c, n = self.counts(), self.node
        for name, text, regular, static in (
            ("kubelet_desired_pods", "Pods the kubelet is told to run", c.desired,
             c.desired_static),
            ("kubelet_active_pods", "Pods counted when admitting new ones", c.active,
             c.active_static),
        ):  # fmt: skip
            g = GaugeMetricFamily(name, text + " (static: not from the API server)",
                                  labels=["static"])  # fmt: skip
            g.add_metric([""], regular)
            g.add_metric(["true"], static)
            yield g
        yield GaugeMetricFamily(
            "kubelet_mirror_pods", "Mirror pods kept for static pods", value=c.mirrors
        )
        g = GaugeMetricFamily("kubelet_node_name", "The node's name; always 1", labels=["node"])
        g.add_metric([n.node_name], 1)
        yield g
        yield GaugeMetricFamily(
            "kubelet_cgroup_version", "The host's cgroup version", value=n.cgroup_version
        )
        yield self._build_info()
        gates = GaugeMetricFamily(
            "kubernetes_feature_enabled", "Whether a feature gate is on (1) or off (0)",
            labels=["name", "stage"],
        )  # fmt: skip
        for gate, stage, on in n.features:
            gates.add_metric([gate, stage], 1 if on else 0)
        yield gates

    def _build_info(self) -> GaugeMetricFamily:
        version = self.node.kubernetes_version
        major, minor = version.lstrip("v").split(".")[:2]
        build = GaugeMetricFamily(
            "kubernetes_build_info",
            "The Kubernetes release this kubelet follows, and what runs it; always 1",
            labels=["build_date", "compiler", "git_commit", "git_tree_state", "git_version",
                    "go_version", "major", "minor", "platform"],
        )  # fmt: skip
        arch = _ARCH.get(platform.machine(), platform.machine())
        build.add_metric(
            ["", "cpython", "", "", version, f"python{platform.python_version()}", major, minor,
             f"linux/{arch}"], 1,
        )  # fmt: skip
        return build

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


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
DEF_BUCKETS = _DEF  # for the families defined next to their component
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

# Upstream's DefBuckets and finer ones below 0.1 s: relists here take milliseconds.
_RELIST = tuple(sorted({*_DEF, 0.0005, 0.001, 0.002, 0.003, 0.0075, 0.015, 0.02, 0.03, 0.075}))

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
POD_IN_PROGRESS_RESIZES = Gauge(
    "kubelet_pod_in_progress_resizes",
    "Number of in-progress resizes for pods.",
    registry=REGISTRY,
)
# The other in-place resize families (InPlacePodVerticalScaling).
_RESIZE_MS = (
    10,
    50,
    100,
    500,
    1000,
    2000,
    5000,
    10000,
    20000,
    30000,
    60000,
    120000,
    300000,
    600000,
)
CONTAINER_REQUESTED_RESIZES = Counter(
    "kubelet_container_requested_resizes",
    "Number of requested resizes, counted at the container level. Different resources on the "
    "same container are counted separately. The 'requirement' label refers to 'memory' or "
    "'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
    ["resource", "requirement", "operation"],
    registry=REGISTRY,
)
POD_RESIZE_DURATION = Histogram(
    "kubelet_pod_resize_duration_milliseconds",
    "Duration in milliseconds to actuate a pod resize",
    ["success"],
    buckets=_RESIZE_MS,
    registry=REGISTRY,
)
POD_PENDING_RESIZES = Gauge(
    "kubelet_pod_pending_resizes",
    "Number of pending resizes for pods.",
    ["reason"],
    registry=REGISTRY,
)
POD_INFEASIBLE_RESIZES = Counter(
    "kubelet_pod_infeasible_resizes",
    "Number of infeasible resizes for pods.",
    ["reason_detail"],
    registry=REGISTRY,
)
POD_DEFERRED_ACCEPTED_RESIZES = Counter(
    "kubelet_pod_deferred_accepted_resizes",
    "Cumulative number of resizes that were accepted after being deferred.",
    ["retry_trigger"],
    registry=REGISTRY,
)
MANAGED_EPHEMERAL_CONTAINERS = Gauge(
    "kubelet_managed_ephemeral_containers",
    "Current number of ephemeral containers in pods managed by this kubelet.",
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
POD_START_SLI_DURATION = Histogram(
    "kubelet_pod_start_sli_duration_seconds",
    "Seconds from a pod's creation until all its containers are started and that is seen "
    "on the watch, image pulls excluded",
    buckets=_POD_START,
    registry=REGISTRY,
)
POD_START_TOTAL_DURATION = Histogram(
    "kubelet_pod_start_total_duration_seconds",
    "Seconds from a pod's creation until all its containers are started and that is seen "
    "on the watch, image pulls included",
    buckets=_POD_START,
    registry=REGISTRY,
)
FIRST_NETWORK_POD_START_SLI = Gauge(
    "kubelet_first_network_pod_start_sli_duration_seconds",
    "kubelet_pod_start_sli_duration_seconds of the first pod not on the host network",
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
    "Containers whose creation or start failed, by type and gRPC code",
    ["container_type", "code"],
    registry=REGISTRY,
)
STARTED_CONTAINERS = Counter(
    "kubelet_started_containers",
    "Containers the kubelet asked the runtime to create, by type",
    ["container_type"],
    registry=REGISTRY,
)
STARTED_PODS = Counter(
    "kubelet_started_pods", "Pod sandboxes the kubelet asked the runtime for", registry=REGISTRY
)
STARTED_PODS_ERRORS = Counter(
    "kubelet_started_pods_errors", "Pod sandboxes the runtime failed to run", registry=REGISTRY
)
STARTED_USERNS_PODS = Counter(
    "kubelet_started_user_namespaced_pods",
    "Pods with a user namespace of their own (hostUsers: false) whose sandbox was created",
    registry=REGISTRY,
)
STARTED_USERNS_PODS_ERRORS = Counter(
    "kubelet_started_user_namespaced_pods_errors",
    "Syncs creating a user-namespaced pod's sandbox that ended with an error",
    registry=REGISTRY,
)
RUN_PODSANDBOX_DURATION = Histogram(
    "kubelet_run_podsandbox_duration_seconds",
    "Seconds of RunPodSandbox calls, by runtime handler",
    ["runtime_handler"],
    buckets=_DEF,
    registry=REGISTRY,
)
RUN_PODSANDBOX_ERRORS = Counter(
    "kubelet_run_podsandbox_errors",
    "Failed RunPodSandbox calls, by runtime handler",
    ["runtime_handler"],
    registry=REGISTRY,
)
PLEG_DISCARD_EVENTS = Counter(
    "kubelet_pleg_discard_events",
    "PLEG events dropped because the event channel was full",
    registry=REGISTRY,
)
EVICTIONS = Counter(
    "kubelet_evictions",
    "Pods evicted, by the eviction signal that was crossed",
    ["eviction_signal"],
    registry=REGISTRY,
)
EVICTION_STATS_AGE = Histogram(
    "kubelet_eviction_stats_age_seconds",
    "Time between when stats are collected, and when pod is evicted based on those stats "
    "by eviction signal",
    ["eviction_signal"],
    buckets=_DEF,
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "kubelet_preemptions",
    "Pods preempted to admit a critical pod, by the first resource it lacked",
    ["preemption_signal"],
    registry=REGISTRY,
)
POD_STATUS_SYNC_DURATION = Histogram(
    "kubelet_pod_status_sync_duration_seconds",
    "Seconds from a change of a pod's status to the API holding it",
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0),
    registry=REGISTRY,
)
POD_WORKER_START_DURATION = Histogram(
    "kubelet_pod_worker_start_duration_seconds",
    "Seconds from the kubelet seeing a pod to its worker starting",
    buckets=_DEF,
    registry=REGISTRY,
)
CONTAINERS_PER_POD = Histogram(
    "kubelet_containers_per_pod_count",
    "Containers in the spec of each pod the kubelet starts working on",
    buckets=(1.0, 2.0, 4.0, 8.0, 16.0),  # ExponentialBuckets(1, 2, 5)
    registry=REGISTRY,
)
RESTARTED_PODS = Counter(
    "kubelet_restarted_pods",
    "Pods started again because they were removed and added back with the same UID "
    "while the kubelet watched them (common for static pods)",
    ["static"],
    registry=REGISTRY,
)
WORKING_PODS = Gauge(
    "kubelet_working_pods",
    "Pods the kubelet works on, by lifecycle (sync, terminating, terminated), whether "
    "a source still wants them (desired), not any more (orphan) or only the runtime "
    "knows them (runtime_only), and whether they are static",
    ["lifecycle", "config", "static"],
    registry=REGISTRY,
)
# Every (config, static) pair upstream reports; a pair with no pod reads 0.
_WORKING_CONFIGS = (
    ("desired", "true"), ("desired", ""), ("orphan", "true"), ("orphan", ""),
    ("runtime_only", "unknown"),
)  # fmt: skip


def set_working_pods(counts: dict[tuple[str, str, str], int]) -> None:
    """kubelet_working_pods from one housekeeping pass's counts, keyed by
    (lifecycle, config, static)."""
    for config, static in _WORKING_CONFIGS:
        for life in ("sync", "terminating", "terminated"):
            WORKING_PODS.labels(life, config, static).set(counts.get((life, config, static), 0))


# Node start-up phases (util/node_startup_latency.py): gauges, set once.
NODE_STARTUP_PRE_KUBELET = Gauge(
    "kubelet_node_startup_pre_kubelet_duration_seconds",
    "Seconds from the machine's boot to the kubelet's start",
    registry=REGISTRY,
)
NODE_STARTUP_PRE_REGISTRATION = Gauge(
    "kubelet_node_startup_pre_registration_duration_seconds",
    "Seconds from the kubelet's start to its first attempt to register the node",
    registry=REGISTRY,
)
NODE_STARTUP_REGISTRATION = Gauge(
    "kubelet_node_startup_registration_duration_seconds",
    "Seconds from the first registration attempt to the Node being created",
    registry=REGISTRY,
)
NODE_STARTUP_POST_REGISTRATION = Gauge(
    "kubelet_node_startup_post_registration_duration_seconds",
    "Seconds from the Node being created to it first being Ready",
    registry=REGISTRY,
)
NODE_STARTUP = Gauge(
    "kubelet_node_startup_duration_seconds",
    "Seconds from the machine's boot to the Node first being Ready",
    registry=REGISTRY,
)
ORPHANED_RUNTIME_PODS = Counter(
    "kubelet_orphaned_runtime_pods",
    "Pods found in the runtime that no pod worker knew of",
    registry=REGISTRY,
)


def container_type(spec: PodSpec, container: object) -> str:
    """The container_type label of the started_containers metrics: which list of
    the pod spec holds `container` (the very object)."""
    labels: tuple[tuple[ContainerKind, str], ...] = (
        ("initContainers", "init_container"),
        ("ephemeralContainers", "ephemeral_container"),
    )
    for kind, label in labels:
        if any(c is container for c in containers_of(spec, kind)):
            return label
    return "container"


# storage_operation_duration_seconds (volume/util/metrics.go), in the kubelet's registry.
STORAGE_OPERATION_DURATION = Histogram(
    "storage_operation_duration_seconds",
    "Seconds of volume operations, by plugin, operation and outcome",
    ["volume_plugin", "operation_name", "status", "migrated"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600),
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
DEVICE_PLUGIN_REGISTRATIONS = Counter(
    "kubelet_device_plugin_registration",
    "Cumulative number of device plugin registrations. Broken down by resource name.",
    ["resource_name"],
    registry=REGISTRY,
)
DEVICE_PLUGIN_ALLOC_DURATION = Histogram(
    "kubelet_device_plugin_alloc_duration_seconds",
    "Duration in seconds to serve a device plugin Allocation request. "
    "Broken down by resource name.",
    ["resource_name"],
    buckets=_DEF,
    registry=REGISTRY,
)


class PodResourcesCounters(Collector):
    """kubelet_pod_resources_endpoint_*: the total is a plain counter; upstream
    names the per-method counters without a _total suffix, which this client
    library adds to every counter (samples and TYPE line), so they are written
    here with upstream's sample names, typed untyped."""

    METHOD_REQUESTS = {
        "list": "kubelet_pod_resources_endpoint_requests_list",
        "get_allocatable": "kubelet_pod_resources_endpoint_requests_get_allocatable",
        "get": "kubelet_pod_resources_endpoint_requests_get",
    }
    METHOD_ERRORS = {
        "list": "kubelet_pod_resources_endpoint_errors_list",
        "get_allocatable": "kubelet_pod_resources_endpoint_errors_get_allocatable",
        "get": "kubelet_pod_resources_endpoint_errors_get",
    }

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}  # (metric name, api version) -> count

    def inc(self, metric: str, version: str) -> None:
        key = (metric, version)
        self.counts[key] = self.counts.get(key, 0) + 1

    def request(self, version: str, method: str) -> None:
        self.inc(self.METHOD_REQUESTS[method], version)

    def error(self, version: str, method: str) -> None:
        self.inc(self.METHOD_ERRORS[method], version)

    def collect(self) -> Iterator[Metric]:
        """Families with a series only, as a Go CounterVec shows nothing before its first use."""
        what = "Number of requests to the PodResource {} endpoint{}. Broken down by server api version."
        for method, metric in self.METHOD_REQUESTS.items():
            yield from self._family(metric, what.format(_ENDPOINTS[method], ""))
        for method, metric in self.METHOD_ERRORS.items():
            yield from self._family(
                metric, what.format(_ENDPOINTS[method], " which returned error")
            )

    def _family(self, metric: str, text: str) -> Iterator[Metric]:
        m = Metric(metric, text, "unknown")
        for (name, version), n in sorted(self.counts.items()):
            if name == metric:
                m.add_sample(metric, {"server_api_version": version}, n)
        if m.samples:
            yield m

    def describe(self) -> Iterator[Metric]:
        return iter(())


_ENDPOINTS = {"list": "List", "get_allocatable": "GetAllocatableResources", "get": "Get"}
POD_RESOURCES_REQUESTS = Counter(
    "kubelet_pod_resources_endpoint_requests",
    "Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
    ["server_api_version"],
    registry=REGISTRY,
)
POD_RESOURCES = PodResourcesCounters()
REGISTRY.register(POD_RESOURCES)
