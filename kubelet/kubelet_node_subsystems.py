"""The node-wide subsystems, built after the pod workers (the rest of
NewMainKubelet in kubelet.go): node status (stats, node-pressure eviction,
graceful shutdown, the Node object), garbage collection, and what the
kubelet's servers read of this node. Same rules as kubelet_subsystems.py:
each builder reads only what was built before it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from kubelet.active_pods import ActivePods
from kubelet.apis.podresources.server import PodResourcesServer
from kubelet.apis.podresources.server_v1 import Gates as PodResourcesGates
from kubelet.apis.podresources.types import Providers
from kubelet.cm.resource_managers import ResourceManagers
from kubelet.core_v1 import NodeFeatures, ResourceList
from kubelet.core_v1 import NodeStatus as NodeObjectStatus
from kubelet.cri.errors import CRIError
from kubelet.eviction.eviction_manager import EvictionManager, EvictionSources, Reclaimers
from kubelet.eviction.memcg_notifier import MemcgCgroups
from kubelet.eviction.signals import NodeSignals
from kubelet.features import Feature
from kubelet.images.image_gc_manager import ImageGCError, ImageGCManager
from kubelet.kubelet_getters import KubeletHost, SyncLoopHeartbeat
from kubelet.kubelet_node_status import NodeStatusManager, RegisteredNode
from kubelet.kubelet_runtime_subsystems import Runtime, Workers
from kubelet.kubelet_subsystems import Node, NodeSetup, Pods, Volumes
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.kuberuntime_gc import ContainerGC, ContainerGCError, NodeEvent
from kubelet.lifecycle.admission import PodAdmitter
from kubelet.logs.container_log_manager import ContainerLogManager
from kubelet.node_lister import NodeLister
from kubelet.nodeshutdown.manager import NodeShutdownManager
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs, node_identity
from kubelet.pod_workers import PodWork, UpdateType
from kubelet.preemption.preemption import CriticalPodAdmissionHandler
from kubelet.stats.cadvisor import cadvisor_registry
from kubelet.stats.ephemeral import EphemeralStorageStats
from kubelet.stats.provider import StatsProvider, resource_registry
from kubelet.status import terminal
from kubelet.status.disruption import KubeletTermination
from kubelet.types import (
    TERMINAL_PHASES,
    Pod,
    PodCondition,
    as_node,
    grace_period,
    name,
    namespace,
    object_ref,
    uid,
)
from kubelet.types import Node as NodeObject
from kubelet.util.node_startup_latency import NodeStartupLatencyTracker


# ----------------------------------------------------------- node status
class _EvictionTarget:
    """What node-pressure eviction and graceful node shutdown read and act on:
    the active pods, and how one is killed and reported."""

    def __init__(self, node: Node, pods: Pods, workers: Workers) -> None:
        self.node = node
        self.pods = pods
        self.workers = workers

    def active_pods(self) -> list[Pod]:
        """Admitted pods that are not finished or being killed."""
        out = []
        for p in self.pods.manager.pods():
            u = uid(p)
            if (
                u in self.pods.rejected
                or self.workers.syncer.is_evicted(u)
                or self.workers.workers.is_terminating(u)
            ):
                continue
            st = self.pods.status.get(u) or {}
            if st.get("phase") not in TERMINAL_PHASES:
                out.append(p)
        return out

    async def evict(
        self, pod: Pod, grace: int, reason: str, message: str,
        condition: PodCondition | None = None,
    ) -> None:  # fmt: skip
        self.fail_and_kill(pod, grace, reason, message, condition)

    def allocated_pods(self) -> list[Pod]:
        """The active pods as admitted (getAllocatedPods): what preemption frees."""
        return [self.pods.allocation.allocated_pod(p) for p in self.active_pods()]

    def preempt(self, pod: Pod, reason: str, message: str, condition: PodCondition) -> None:
        """Critical pod preemption: the pod's own grace period."""
        self.fail_and_kill(pod, None, reason, message, condition)

    def start_after(self, pod: Pod, victims: list[Pod]) -> None:
        """The critical pod starts once the pods preempted for it have stopped
        (each waited for as killPodNow waits for a kill)."""
        waits = [(uid(v), kill_timeout(grace_period(v))) for v in victims]
        self.workers.workers.start_after(uid(pod), waits)

    def fail_and_kill(
        self, pod: Pod, grace: int | None, reason: str, message: str,
        condition: PodCondition | None,
    ) -> None:  # fmt: skip
        """Report the pod Failed with this reason, stop counting it, and have its
        worker kill it (grace None: its own)."""
        u, status = uid(pod), self.pods.status
        self.workers.syncer.mark_evicted(u, reason, message)
        self.pods.admitter.release(u)
        old = status.get(u) or {}
        new = terminal.failed_status(old, pod, reason, message, condition, status.tracking)
        status.set_pod_status(u, new, pod)
        self.workers.workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))

    async def kill_now(self, pod: Pod, grace: int, why: KubeletTermination) -> None:
        """killPodNow: stop the pod with this grace period and final status;
        returns once its containers are stopped, raises TimeoutError when that
        takes more than 1.5 x grace (at least 10 s)."""
        u, workers = uid(pod), self.workers.workers
        self.workers.syncer.mark_terminated_by_kubelet(u, why)
        self.pods.admitter.release(u)
        workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
        if not await workers.wait_terminated(u, kill_timeout(grace)):
            msg = "Container runtime did not kill the pod within specified grace period."
            if self.node.recorder is not None:
                self.node.recorder.event(object_ref(pod), "Warning", "ExceededGracePeriod", msg)
            raise TimeoutError("timeout waiting to kill pod")

    def pods_for_shutdown(self) -> list[Pod]:
        """Admitted pods whose containers may still run, those being killed
        included (a shutdown may shorten their grace period)."""
        states = self.pods.worker_states
        return [
            p for p in self.pods.manager.pods()
            if uid(p) not in self.pods.rejected and states.could_have_running_containers(uid(p))
        ]  # fmt: skip


def kill_timeout(grace: int) -> float:
    """How long killPodNow waits for a kill: 1.5 x grace, at least 10 s."""
    return max(grace + grace // 2, 10)


def first_of(*waits: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """One wait that returns when the first of several returns (the others are
    cancelled, so each is asked afresh next time)."""

    async def wait() -> None:
        tasks = [asyncio.ensure_future(w()) for w in waits]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()

    return wait


@dataclass(frozen=True)
class NodeStatus:
    stats: StatsProvider
    eviction: EvictionManager
    # Graceful node shutdown; None when its gate is off or no period is set.
    shutdown: NodeShutdownManager | None
    # Set to have the node status reported now rather than on its period.
    due: asyncio.Event
    # Registration and status updates in cluster mode (None standalone).
    reporter: NodeStatusManager | None
    # Admitted pods that are not finished or being killed (admission's count).
    active_pods: Callable[[], list[Pod]]
    # The Node admission matches pods against (labels, taints, allocatable).
    lister: NodeLister
    # Evicts pods to admit a critical one (critical pod preemption).
    preemption: CriticalPodAdmissionHandler

    def readiness(self, runtime: Runtime) -> str | None:
        """Why the node is not Ready: runtime and PLEG health, then a shutdown."""
        shutdown = self.shutdown.shutdown_status() if self.shutdown is not None else None
        return runtime.readiness() or shutdown


def _build_eviction(
    node: Node,
    pods: Pods,
    volumes: Volumes,
    runtime: Runtime,
    stats: StatsProvider,
    target: _EvictionTarget,
) -> EvictionManager:
    """Node-pressure eviction: its signals, what it measures of each pod, and
    how it evicts."""
    cfg = node.config
    # Local storage limits measured for the pods that have them.
    ephemeral = EphemeralStorageStats(
        runtime.state.runtime, cfg.pod_logs_dir, node.pods_dir,
        lambda u: pods.cache.get(u)[0], volumes.bytes_used, volume_inodes=volumes.inodes_used,
    )  # fmt: skip
    # allocatableMemory.available: the kubepods cgroup, when node allocatable holds the pods.
    kubepods = None
    if "pods" in cfg.enforce_node_allocatable and cfg.cgroups_per_qos:
        kubepods = f"{stats.cgroup_root}/kubepods" if stats.cgroup_root else "kubepods"
    signals = NodeSignals(
        node.root_dir, stats.version, stats.hierarchy, kubepods,
        runtime.state.images.image_fs_info,
        separate_disk_gc=node.features.enabled(Feature.KubeletSeparateDiskGC),
    )  # fmt: skip
    sources = EvictionSources(
        target.active_pods, signals.observe, stats.pod_working_sets, ephemeral.measure,
        layout=signals.layout, processes=stats.pod_process_counts,
        container_usage=stats.container_working_sets,
    )  # fmt: skip
    return EvictionManager(
        cfg, node.root_dir, sources, target.evict, recorder=node.recorder, node_event=node.event,
        memcg=(
            MemcgCgroups(stats.version, stats.hierarchy, kubepods)
            if cfg.kernel_memcg_notification
            else None
        ),
    )  # fmt: skip


def _node_reporter(
    node: Node,
    volumes: Volumes,
    runtime: Runtime,
    resources: ResourceManagers,
    conditions: tuple[EvictionManager, NodeShutdownManager | None, asyncio.Event],
    inputs: tuple[NodeInputs | None, RegisteredNode],
    lister: NodeLister,
) -> NodeStatusManager | None:
    """What writes the Node's status (cluster mode only), reading the runtime,
    the volumes, the devices, eviction's pressures and a shutdown under way;
    conditions: (eviction, shutdown, what wakes the reporter)."""
    eviction, shutdown, due = conditions
    static, registered = inputs
    if node.kube_client is None or static is None:
        return None
    readers = replace(
        static,
        runtime_version=lambda: runtime.state.runtime_version,
        runtime_handlers=lambda: runtime.state.node_runtime_handlers,
        runtime_features=node_features(node, runtime),
        readiness_checks=[runtime.readiness, volumes.csi.readiness]
        + ([shutdown.shutdown_status] if shutdown is not None else []),
        images=lambda: runtime.state.node_images,
        memory_pressure=lambda: eviction.under("MemoryPressure"),
        disk_pressure=lambda: eviction.under("DiskPressure"),
        pid_pressure=lambda: eviction.under("PIDPressure"),
        # CSI: volumes attached or staged, and a staging that waits to be reported.
        volumes_in_use=volumes.csi.volumes_in_use,
        volumes_reported=volumes.csi.volumes_reported,
        urgent=first_of(volumes.csi.report_needed, resources.devices.capacity_changed),
        device_resources=resources.devices.capacity,
    )
    return NodeStatusManager(
        node.kube_client, readers, node.recorder, registered, wake=due, current=lister.watched,
        startup=NodeStartupLatencyTracker.from_host(),
    )  # fmt: skip


def build_node_status(
    node: Node,
    pods: Pods,
    volumes: Volumes,
    runtime: Runtime,
    workers: Workers,
    resources: ResourceManagers,
    setup: NodeSetup,
) -> NodeStatus:
    """Pod and node usage from the Cython parsers (/stats/summary,
    /metrics/resource), node-pressure eviction, and the Node object's status."""
    cfg = node.config
    stats = StatsProvider(
        pods.manager.pods, node.root_dir, node.name, cfg.cgroup_root,
        volume_usage=volumes.stats.usage,
        pod_status=lambda u: pods.cache.get(u)[0],
        container_resources=runtime.manager.resources,
        psi=node.features.enabled(Feature.KubeletPSI),
    )  # fmt: skip
    target = _EvictionTarget(node, pods, workers)
    eviction = _build_eviction(node, pods, volumes, runtime, stats, target)
    due = asyncio.Event()
    shutdown = NodeShutdownManager.from_config(
        cfg, node.features, target.kill_now, target.pods_for_shutdown, node.root_dir,
        on_status_change=due.set, node_event=node.event,
    )  # fmt: skip
    initial = _initial_node(node, setup.inputs, resources, node_features(node, runtime))
    lister = NodeLister(node.kube_client, node.name, initial)
    reporter = _node_reporter(
        node, volumes, runtime, resources, (eviction, shutdown, due),
        (setup.inputs, setup.registered), lister,
    )  # fmt: skip
    preemption = CriticalPodAdmissionHandler(
        target.allocated_pods, target.preempt, target.start_after, node.recorder
    )
    return NodeStatus(
        stats, eviction, shutdown, due, reporter, target.active_pods, lister, preemption
    )  # fmt: skip


def build_admission(
    node: Node, pods: Pods, resources: ResourceManagers, node_status: NodeStatus
) -> PodAdmitter:
    """The admit handlers a new pod passes, in upstream's order (lifecycle/admission.py)."""
    return PodAdmitter(
        node_status.eviction, node_status.shutdown, pods.sysctls, resources, node_status.lister,
        pods.admitter, pods.apparmor, node.features.enabled(Feature.PodLevelResources),
        node_status.preemption,
    )  # fmt: skip


def node_features(node: Node, runtime: Runtime) -> Callable[[], NodeFeatures | None]:
    """The NodeFeatures setter: the runtime's features while the
    SupplementalGroupsPolicy gate is on, else none."""
    if not node.features.enabled(Feature.SupplementalGroupsPolicy):
        return lambda: None
    return lambda: runtime.state.node_features


def _initial_node(
    node: Node, inputs: NodeInputs | None, resources: ResourceManagers,
    features: Callable[[], NodeFeatures | None],
) -> Callable[[], NodeObject]:  # fmt: skip
    """initialNode as admission reads it: the labels and taints it registers
    with, the allocatable computed at start plus the device plugins' now, and
    the runtime's features."""
    if inputs is not None:
        identity = node_identity(inputs)
    else:  # built without flags (tests): the labels every node has
        arch = machine_info().architecture
        labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
                  "beta.kubernetes.io/arch": arch}  # fmt: skip
        identity = {"metadata": {"name": node.name, "labels": labels}, "spec": {}}

    def initial() -> NodeObject:
        devices = resources.devices.capacity()
        alloc: ResourceList = dict(node.allocatable)
        alloc.update({r: "0" for r in devices.removed})
        alloc.update({r: str(n) for r, n in devices.allocatable.items()})
        status: NodeObjectStatus = {"allocatable": alloc}
        if (found := features()) is not None:
            status["features"] = found
        return as_node({**identity, "status": status})

    return initial


# -------------------------------------------------------------------- GC
@dataclass(frozen=True)
class GarbageCollectors:
    """StartGarbageCollection, and container log rotation."""

    containers: ContainerGC
    images: ImageGCManager
    logs: ContainerLogManager

    def reclaimers(self) -> Reclaimers:
        """What the eviction manager frees before it evicts a pod for disk."""

        async def containers() -> str | None:
            try:
                await self.containers.garbage_collect(evict_non_deleted_pods=True)
            except (ContainerGCError, CRIError) as err:
                return str(err)
            return None

        async def images() -> str | None:
            try:
                await self.images.delete_unused_images()
            except (ImageGCError, CRIError) as err:
                return str(err)
            return None

        return Reclaimers(containers, images)


def build_gc(
    node: Node, pods: Pods, workers: Workers, runtime: Runtime, sandbox_image: str
) -> GarbageCollectors:
    """Built once the sandbox image is known (the flag, or the runtime's answer)."""

    def pod_content_needed(pod_uid: str) -> bool:
        # False once the pod is gone from every source and its worker is done
        # (ShouldPodContentBeRemoved upstream): its dead containers may go.
        return pods.manager.get(pod_uid) is not None or (
            workers.workers.could_have_running_containers(pod_uid)
        )

    def pod_runtime_removable(pod_uid: str) -> bool:
        return not workers.workers.could_have_running_containers(pod_uid)

    rt, cfg = runtime.state.runtime, node.config
    node_event: NodeEvent = node.event
    return GarbageCollectors(
        ContainerGC(rt, pod_content_needed, cfg.pod_logs_dir,
                    # ShouldPodRuntimeBeRemoved: the worker stopped every container
                    # (eviction's reclaim may then take a live pod's dead ones).
                    pod_terminated=pod_runtime_removable,
                    sources_ready=pods.sources_ready.is_set, node_event=node_event,
                    container_logs_dir=legacy.CONTAINER_LOGS_DIR),
        ImageGCManager.from_config(cfg, runtime.state.images, rt, sandbox_image=sandbox_image,
                                   node_event=node_event),
        ContainerLogManager.from_config(cfg, rt),
    )  # fmt: skip


# --------------------------------------------------------------- servers
def build_host(
    node: Node,
    pods: Pods,
    runtime: Runtime,
    node_status: NodeStatus,
    heartbeat: SyncLoopHeartbeat,
    resources: ResourceManagers,
) -> KubeletHost:
    """What the kubelet's servers read of this node."""
    cfg = node.config
    return KubeletHost(
        pods.manager,
        pods.status,
        runtime.state.runtime,
        node_status.stats,
        resource_registry(node_status.stats),
        cadvisor_registry(node_status.stats, machine_info()),
        sync_frequency=float(cfg.sync_frequency),
        streaming_idle_timeout=float(cfg.streaming_connection_idle_timeout),
        last_loop=heartbeat.last_beat,
        pleg_healthy=runtime.pleg.healthy,
        device_plugins=resources.devices.server.healthy,
        clock=node.clock,
    )


# ---------------------------------------------------------- pod-resources
class _PodsView:
    """kubeletPodsProvider: the pod manager's pods, and the active ones."""

    def __init__(self, pods: Pods) -> None:
        self.manager = pods.manager
        self.active = ActivePods(
            pods.manager, pods.rejected, pods.worker_states, pods.status.get, pods.cache
        )

    def active_pods(self) -> list[Pod]:
        return self.active.active_pods()

    def all_pods(self) -> list[Pod]:
        return self.manager.pods()

    def pod_by_name(self, pod_namespace: str, pod_name: str) -> Pod | None:
        pod = self.manager.get_by_full_name(f"{pod_name}_{pod_namespace}")
        # The full name joins with "_": check both parts, not the joined string.
        if pod is None or name(pod) != pod_name or namespace(pod) != pod_namespace:
            return None
        return pod


def build_pod_resources(node: Node, pods: Pods, resources: ResourceManagers) -> PodResourcesServer:
    """ListenAndServePodResources: the pod-resources API on the root dir's socket."""
    gates = PodResourcesGates(
        get=node.features.enabled(Feature.KubeletPodResourcesGet),
        dynamic_resources=node.features.enabled(Feature.KubeletPodResourcesDynamicResources),
        list_active_pods=node.features.enabled(Feature.KubeletPodResourcesListUseActivePods),
    )
    providers = Providers(
        _PodsView(pods), resources.devices, resources.cpu, resources.memory, resources.dra
    )
    return PodResourcesServer(node.root_dir, providers, gates)
