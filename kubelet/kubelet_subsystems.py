"""The Kubelet's subsystems, each with its builder (NewMainKubelet in
kubelet.go, cut by subsystem): the node, pods, resource managers, volumes and
probes here; the runtime and the pod workers in kubelet_runtime_subsystems.py;
the node-wide ones built after the pod workers (node status, GC, what the
servers read) in kubelet_node_subsystems.py.

Kubelet.__init__ calls the builders in this order; each returns a fully built
object and reads only what the builders before it returned. What flows back
up (a probe result changed, a pod's volumes are ready, a pod's containers have
all stopped) goes through objects built first (SyncRequests, PodWorkerStates),
never through a reference to something built later.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet.active_pods import ActivePods
from kubelet.allocation.allocation_manager import AllocationManager, NodeLimits
from kubelet.apis.config import KubeletConfiguration
from kubelet.checkpointmanager import CheckpointStore
from kubelet.client.rest import APIClient
from kubelet.cm.container_manager import ContainerManager
from kubelet.cm.cpumanager.topology import discover as discover_cpus
from kubelet.cm.devicemanager.server import WatcherHandler
from kubelet.cm.dra.claiminfo import ClaimInfoCache
from kubelet.cm.dra.plugin import DRAPluginManager, HealthStreamHandler
from kubelet.cm.resource_managers import (
    DRASetup,
    ResourceManagerConfig,
    ResourceManagers,
    apply_reserved_cpus,
    new_dra_claims,
    new_resource_managers,
    node_reservation,
)
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.sysinfo import discover as discover_machine
from kubelet.config.apiserver import APIServerSource
from kubelet.config.config import PodConfig
from kubelet.container.cache import Cache, PodCache
from kubelet.cri.types import RuntimeService
from kubelet.envvars import ServiceInformer
from kubelet.events import AnnotatedRecorder
from kubelet.features import Feature, FeatureGate
from kubelet.kubelet_node_status import RegisteredNode
from kubelet.kubelet_pods import DATA_DIR_MODE
from kubelet.kuberuntime.swap import NO_SWAP, container_swap_behavior, node_swap_config
from kubelet.lifecycle.apparmor import Validator as AppArmorValidator
from kubelet.lifecycle.apparmor import host_error as apparmor_host_error
from kubelet.lifecycle.predicate import Admitter
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs, max_pods
from kubelet.objectcache import CONFIGMAP, SECRET, WatchingObjectManager
from kubelet.pluginmanager import CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN
from kubelet.pluginmanager.manager import PluginManager, registry_dir
from kubelet.pod_workers import PodWorkerStates, SyncRequests
from kubelet.podmanager import PodManager
from kubelet.prober.prober import Prober
from kubelet.prober.prober_manager import ProbeManager
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassManager
from kubelet.stats.volumes import VolumeStatsCalculator
from kubelet.status import generation
from kubelet.status.resize_conditions import ResizeConditions
from kubelet.status.status_manager import StatusManager
from kubelet.sysctl import SysctlAllowlist
from kubelet.token.manager import TokenManager
from kubelet.types import ObjectReference
from kubelet.util import filesystem
from kubelet.util.clock import Clock
from kubelet.util.gotime import meta_now
from kubelet.util.pod_startup_latency import PodStartupLatencyTracker
from kubelet.util.quantity import cpu_millis, to_bytes
from kubelet.util.workqueue import PodWorkQueue, WorkQueue
from kubelet.volume import VolumeHost
from kubelet.volume.configmap import ConfigMapPlugin
from kubelet.volume.csi.host import CSIHost
from kubelet.volume.downwardapi import DownwardAPIPlugin
from kubelet.volume.emptydir import EmptyDirPlugin
from kubelet.volume.hostpath import HostPathPlugin
from kubelet.volume.projected import ProjectedPlugin
from kubelet.volume.pvc import PVCPlugin, claim_refs
from kubelet.volume.secret import SecretPlugin
from kubelet.volumemanager.cache import PodVolumeStates
from kubelet.volumemanager.manager import VolumeManagerImpl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Node:
    """What the kubelet is told about its node; nothing here is built."""

    config: KubeletConfiguration
    name: str
    root_dir: str
    ips: list[str]
    # Node status allocatable: admission and the env's resource defaults.
    allocatable: dict[str, str]
    features: FeatureGate
    recorder: AnnotatedRecorder | None
    kube_client: APIClient | None
    clock: Clock

    @property
    def ref(self) -> ObjectReference:
        return {"kind": "Node", "name": self.name, "uid": self.name, "namespace": ""}

    @property
    def pods_dir(self) -> str:
        return os.path.join(self.root_dir, "pods")

    def event(self, etype: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(self.ref, etype, reason, message)


@dataclass(frozen=True)
class NodeSetup:
    """What the command found out about the node before the Kubelet is built
    (cmd/node.py). Left out, each is as standalone: discovered or empty."""

    ip: str | None = None
    allocatable: dict[str, str] | None = None
    # What the Node status is computed from (cluster mode).
    inputs: NodeInputs | None = None
    # The Node as registered, read by mirror pods' owner.
    registered: RegisteredNode = field(default_factory=RegisteredNode)
    # What the CPU and memory managers divide up, and what the node reserves.
    machine_topology: MachineTopology | None = None
    container_manager: ContainerManager | None = None


def build_node(
    config: KubeletConfiguration,
    name: str,
    root_dir: str,
    setup: NodeSetup,
    clients: tuple[AnnotatedRecorder | None, APIClient | None],
    clock: Clock,
) -> Node:
    recorder, client = clients
    ips = [setup.ip] if setup.ip else ["127.0.0.1"]
    allocatable = dict(setup.allocatable or {})
    features = FeatureGate(config.feature_gates)
    return Node(config, name, root_dir, ips, allocatable, features, recorder, client, clock)


# ------------------------------------------------------------------ pods
@dataclass(frozen=True)
class Pods:
    """Where pods come from, what the kubelet knows of each, and admission."""

    config: PodConfig
    api_source: APIServerSource | None
    configmaps: WatchingObjectManager
    secrets: WatchingObjectManager
    manager: PodManager
    services: ServiceInformer | None
    runtime_classes: RuntimeClassManager | None
    cache: PodCache
    work_queue: PodWorkQueue
    worker_states: PodWorkerStates
    status: StatusManager
    sync_requests: SyncRequests
    admitter: Admitter
    # Allocated resources and in-place resizes (InPlacePodVerticalScaling).
    allocation: AllocationManager
    # kubelet_pod_start_sli_duration_seconds: told by the watch, the status
    # manager and the image pulls.
    startup: PodStartupLatencyTracker
    sysctls: SysctlAllowlist
    apparmor: AppArmorValidator  # what the host's kernel allows, read at start-up
    rejected: set[str]  # UIDs of pods admission refused
    # Set once every configured source has delivered its pods.
    sources_ready: asyncio.Event


def build_dra_claims(node: Node) -> ClaimInfoCache | None:
    """DRA on: the claim info cache, read from its checkpoint before the pods
    are built (the status manager asks it) and handed to the DRA manager."""
    if not node.features.enabled(Feature.DynamicResourceAllocation):
        return None
    filesystem.mkdir_all(node.root_dir, DATA_DIR_MODE)
    return new_dra_claims(node.root_dir)


def build_pods(node: Node, volumes: PodVolumeStates, dra_claims: ClaimInfoCache | None) -> Pods:
    """volumes: asked before a pod's API object is deleted whether its volumes
    are torn down (the volume manager, built later on these states, tells the
    status manager of unmounts). dra_claims: a pod whose claims are still
    prepared could still run, as upstream's PodCouldHaveRunningContainers says:
    its terminal phase waits, so its devices are not handed on meanwhile."""
    cfg, client = node.config, node.kube_client
    pod_config = PodConfig()
    # configMaps and secrets of the node's pods: one watch per referenced object.
    configmaps = WatchingObjectManager(CONFIGMAP, client, cfg.sync_frequency)
    secrets = WatchingObjectManager(SECRET, client, cfg.sync_frequency)
    manager = PodManager([configmaps, secrets])
    # Cluster mode: the API server is a pod source and pod statuses are written
    # there. None of it in standalone mode.
    startup = PodStartupLatencyTracker()
    api_source = (
        APIServerSource(client, node.name, pod_config, startup) if client is not None else None
    )
    worker_states = PodWorkerStates()
    status = StatusManager(
        client,
        api_pod=api_source.get if api_source is not None else None,
        desired_pod=manager.get,
        mirror_of=manager.get_mirror,
        # PodResourcesAreReclaimed: containers stopped and volumes torn down, so
        # a ReadWriteOncePod claim or an attached volume is free once it is gone.
        can_delete=lambda u: worker_states.all_stopped(u) and volumes.volumes_torn_down(u),
        could_run=_could_run(worker_states, dra_claims),
        tracking=node.features.enabled(generation.GATE),
        on_status_set=startup.record_status_updated,
    )
    alloc = node.allocatable
    admitter = Admitter(
        int(alloc.get("pods", max_pods(cfg, machine_info().num_cores))),
        cpu_millis(alloc.get("cpu", "1000000")),
        to_bytes(alloc.get("memory", str(machine_info().memory_capacity))),
    )
    return Pods(
        pod_config, api_source, configmaps, secrets, manager,
        ServiceInformer(client) if client is not None else None,
        RuntimeClassManager(client) if client is not None else None,
        Cache(), WorkQueue(), worker_states, status, SyncRequests(), admitter,
        _allocation(node, admitter), startup,
        # Safe sysctls of this kernel plus allowedUnsafeSysctls (validated at startup).
        SysctlAllowlist.for_node(cfg.allowed_unsafe_sysctls),
        AppArmorValidator(apparmor_host_error()),
        set(), asyncio.Event(),
    )  # fmt: skip


def _could_run(workers: PodWorkerStates, claims: ClaimInfoCache | None) -> Callable[[str], bool]:
    if claims is None:
        return workers.could_have_running_containers
    return lambda u: workers.could_have_running_containers(u) or claims.holds_pod(u)


def _allocation(node: Node, admitter: Admitter) -> AllocationManager:
    """Checkpointed under the root dir while InPlacePodVerticalScaling is on
    (as upstream: off, nothing is kept and no resize is accepted)."""
    cfg = node.config
    limits = NodeLimits(
        admitter.cpu_m, admitter.memory,
        cpu_manager_static=cfg.cpu_manager_policy == "static",
        memory_manager_static=cfg.memory_manager_policy == "Static",
    )  # fmt: skip
    on = node.features.enabled(Feature.InPlacePodVerticalScaling)
    swap = node_swap_config(cfg.memory_swap.swap_behavior)
    return AllocationManager(
        limits, admitter, ResizeConditions(meta_now),
        CheckpointStore(node.root_dir) if on else None,
        swaps=lambda pod, c: container_swap_behavior(swap, pod, c) != NO_SWAP, enabled=on,
    )  # fmt: skip


# ----------------------------------------------------- resource managers
def build_resource_managers(
    node: Node, pods: Pods, setup: NodeSetup, dra_claims: ClaimInfoCache | None
) -> ResourceManagers:
    """CPU, memory and topology managers: admission allocates, container
    creation pins (cpuset_cpus/mems), a reconcile loop keeps pools in line.
    They reserve what the container manager's node allocatable reserves.
    ContainerManagerError (a setting or state file they refuse) is fatal."""
    cfg, container_manager = node.config, setup.container_manager
    topo = setup.machine_topology or discover_machine()
    reserved_cpus = apply_reserved_cpus(cfg, discover_cpus(topo))
    cm = container_manager
    reservation = cm.reservation() if cm is not None else node_reservation(cfg, topo)
    # Their state files are written into the root dir now: made as
    # setupDataDirs makes it (0750), which upstream runs before them.
    filesystem.mkdir_all(node.root_dir, DATA_DIR_MODE)
    active = ActivePods(
        pods.manager, pods.rejected, pods.worker_states, pods.status.get, pods.cache
    )
    # Before the sources start nothing is admitted; after, ready once each delivered.
    has_sources = bool(cfg.static_pod_path or cfg.static_pod_url or node.kube_client)
    dra = None
    if dra_claims is not None:

        def new_plugins(health: HealthStreamHandler | None) -> DRAPluginManager:
            # Given a handler (ResourceHealthStatus), it opens each driver's health stream.
            return DRAPluginManager(node.kube_client, node.name, health=health)

        dra = DRASetup(dra_claims, new_plugins)
    return new_resource_managers(
        cfg,
        ResourceManagerConfig(topo, reservation, node.root_dir, reserved_cpus),
        node.features,
        active,
        lambda: pods.sources_ready.is_set() or not has_sources,
        dra=dra,
        kube_client=node.kube_client,
        # A device's health changed: its pods' statuses are synced now.
        device_health_changed=pods.sync_requests.request,
    )


# --------------------------------------------------------------- volumes
@dataclass(frozen=True)
class Volumes:
    tokens: TokenManager | None
    manager: VolumeManagerImpl
    # Volume usage per pod, measured every volumeStatsAggPeriod off the loop.
    stats: VolumeStatsCalculator
    # Node plugins (CSI drivers, device plugins, DRA drivers) register
    # through sockets in <root>/plugins_registry.
    plugins: PluginManager
    csi: CSIHost

    def bytes_used(self, pod_uid: str) -> dict[str, int]:
        """Bytes in each of the pod's volumes, from the volume stats' last pass."""
        return {v.name: v.used_bytes for v in self.stats.usage(pod_uid)}

    def inodes_used(self, pod_uid: str) -> dict[str, int]:
        """Inodes in each of the pod's volumes, from the same pass."""
        return {v.name: v.inodes_used for v in self.stats.usage(pod_uid)}


def build_volumes(
    node: Node, pods: Pods, resources: ResourceManagers, states: PodVolumeStates
) -> Volumes:
    client, alloc = node.kube_client, node.allocatable
    tokens = TokenManager(client) if client is not None else None
    csi = CSIHost(
        VolumeHost(node.root_dir, node.name), client, tokens, node.recorder, node.clock,
        volume_health=node.features.enabled(Feature.CSIVolumeHealth),
    )  # fmt: skip
    plugins = PluginManager(registry_dir(node.root_dir), clock=node.clock)
    plugins.add_handler(CSI_PLUGIN, csi.handler)
    plugins.add_handler(DEVICE_PLUGIN, WatcherHandler(resources.devices.server))
    if resources.dra is not None:
        plugins.add_handler(DRA_PLUGIN, resources.dra.plugins)
    manager = VolumeManagerImpl(
        VolumeHost(node.root_dir, node.name),
        [
            ConfigMapPlugin(pods.configmaps),
            SecretPlugin(pods.secrets),
            DownwardAPIPlugin(lambda: alloc),
            ProjectedPlugin(pods.configmaps, pods.secrets, tokens, lambda: alloc),
            EmptyDirPlugin(lambda: to_bytes(alloc.get("memory", "0"))),
            HostPathPlugin(),
            PVCPlugin(client.get if client is not None else None, node.root_dir),
            csi.plugin,
        ],
        # Every volume of the pod is set up: sync it now, not on its next retry.
        on_pod_ready=pods.sync_requests.request,
        # Torn down: the status manager may now delete the pod's API object.
        on_pod_unmounted=pods.status.enqueue,
        recorder=node.recorder.event if node.recorder is not None else None,
        clock=node.clock,
        states=states,
    )
    stats = VolumeStatsCalculator(
        lambda: list(pods.manager.uids()),
        lambda u: {n: v.host_path for n, v in manager.get_mounted_volumes(u).items()},
        node.pods_dir,
        period=node.config.volume_stats_agg_period,
        # CSI volumes: asked of their driver (NodeGetVolumeStats), not walked.
        remote=csi.plugin.volume_stats,
        claims=lambda u: claim_refs(pods.manager.get(u)),
    )
    return Volumes(tokens, manager, stats, plugins, csi)


# ---------------------------------------------------------------- probes
def build_probes(node: Node, pods: Pods, runtime_service: RuntimeService) -> ProbeManager:
    """Readiness decides `ready`; liveness and startup failures restart. A result
    that changed asks for a sync of its pod."""
    return ProbeManager(
        Prober(runtime_service), pods.status.get, pods.sync_requests.request, node.recorder
    )
