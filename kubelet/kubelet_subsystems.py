"""The Kubelet's subsystems, each with its builder (NewMainKubelet in
kubelet.go, cut by subsystem); the node-wide ones built after the pod workers
(node status, GC, what the servers read) are in kubelet_node_subsystems.py.

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
from kubelet.cm import hugepages
from kubelet.cm.cgroup_manager import CgroupManager, PodContainerManager
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
from kubelet.container.env import EnvContext
from kubelet.credentialprovider.plugin.plugin import APIServiceAccounts
from kubelet.credentialprovider.plugin.plugins import LoadedPlugins, PluginKeyring
from kubelet.credentialprovider.provider import NodeDockerKeyring
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.envvars import ServiceInformer
from kubelet.events import AnnotatedRecorder
from kubelet.features import Feature, FeatureGate
from kubelet.images.puller import ImagePuller
from kubelet.kubelet_node_status import RegisteredNode
from kubelet.kubelet_pods import DATA_DIR_MODE, PodRuntimeHelper, PullSecretGetter
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.kuberuntime_image import PullCredentials
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.kuberuntime.swap import NO_SWAP, container_swap_behavior, node_swap_config
from kubelet.lifecycle.apparmor import Validator as AppArmorValidator
from kubelet.lifecycle.apparmor import host_error as apparmor_host_error
from kubelet.lifecycle.predicate import Admitter
from kubelet.mirror_client import MirrorClient
from kubelet.network.dns import DNSConfigurer
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs, max_pods
from kubelet.objectcache import CONFIGMAP, SECRET, WatchingObjectManager
from kubelet.pleg.differ import RelistDiffer
from kubelet.pleg.evented import EventedPLEG
from kubelet.pleg.generic import GenericPLEG
from kubelet.pluginmanager import CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN
from kubelet.pluginmanager.manager import PluginManager, registry_dir
from kubelet.pod_sync import KubeletPodSyncer
from kubelet.pod_workers import PodWorkers, PodWorkerStates, SyncRequests
from kubelet.podmanager import PodManager
from kubelet.prober.prober import Prober
from kubelet.prober.prober_manager import ProbeManager
from kubelet.runtime_state import RuntimeState
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassManager
from kubelet.stats.volumes import VolumeStatsCalculator
from kubelet.status import generate, generation
from kubelet.status.resize_conditions import ResizeConditions
from kubelet.status.status_manager import StatusManager
from kubelet.sysctl import SysctlAllowlist
from kubelet.token.manager import TokenManager
from kubelet.types import ObjectReference
from kubelet.userns import idrange
from kubelet.userns.userns_manager import UsernsManager
from kubelet.util import filesystem
from kubelet.util.clock import Clock
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


@dataclass(frozen=True)
class RuntimeSetup:
    """The runtime manager's options the command (or a test) may set."""

    # --pod-infra-container-image: kept from image GC (else asked of the runtime).
    sandbox_image: str = ""
    crash_backoff: Backoff | None = None
    image_backoff: Backoff | None = None
    credential_plugins: LoadedPlugins | None = None


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
        limits, admitter, ResizeConditions(generate.now),
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


# --------------------------------------------------------------- runtime
@dataclass(frozen=True)
class Runtime:
    pod_cgroups: PodContainerManager | None  # kubepods/<qos>/pod<uid>, cgroupfs driver
    state: RuntimeState
    helper: PodRuntimeHelper
    manager: RuntimeManager
    pleg: GenericPLEG
    evented: EventedPLEG | None  # the EventedPLEG gate
    userns: UsernsManager  # pods' user namespace ranges (hostUsers: false)

    def readiness(self) -> str | None:
        """Why the node is not Ready, or None (runtime and PLEG health)."""
        return self.state.error or self.pleg.healthy()


def _userns_manager(node: Node, state: RuntimeState) -> UsernsManager:
    """The manager of pods' user namespace ranges, with the ranges of the pods
    already on disk (IDRangeError, UsernsError: the kubelet must not start)."""
    cfg = node.config
    enabled = node.features.enabled(Feature.UserNamespacesSupport)
    ids = cfg.user_namespaces.ids_per_pod or idrange.UNIT
    rng = (
        idrange.node_range(ids, cfg.max_pods)
        if enabled
        else idrange.IDRange(idrange.DEFAULT_FIRST_ID, idrange.DEFAULT_LENGTH, ids)
    )
    manager = UsernsManager(node.root_dir, rng, state, enabled=enabled)
    manager.recover()
    return manager


def _runtime_helper(
    node: Node, pods: Pods, volumes: Volumes, state: RuntimeState
) -> PodRuntimeHelper:
    """What kuberuntime asks of the pod's world: DNS, environment, mounts."""
    cfg, client = node.config, node.kube_client
    dns = DNSConfigurer(
        cfg.cluster_dns, cfg.cluster_domain, cfg.resolv_conf,
        node_ips=node.ips, recorder=node.recorder, node_ref=node.ref,
    )  # fmt: skip
    env = EnvContext(
        host_ips=tuple(node.ips),
        node_ips=tuple(node.ips),
        node_allocatable=node.allocatable,
        configmaps=pods.configmaps if client is not None else None,
        secrets=pods.secrets if client is not None else None,
        services=pods.services,
    )
    return PodRuntimeHelper(
        node.root_dir, dns, cfg.cluster_domain, env, volumes.manager, (state, pods.runtime_classes)
    )


def _pod_cgroups(
    cfg: KubeletConfiguration, resources: ResourceManagers
) -> PodContainerManager | None:
    """The pods' cgroups (kubepods/<qos>/pod<uid>), with cgroupsPerQOS."""
    if not cfg.cgroups_per_qos:
        # Upstream reads the runtime's cgroups (cAdvisor, CRI): it lists them.
        log.warning(
            "cgroupsPerQOS is false: pods get no cgroup of the kubelet's, so "
            "/stats/summary and /metrics/resource carry no pod or container figures"
        )
        return None
    pcm = PodContainerManager(
        CgroupManager(cfg.cgroup_root),
        cfg.cpu_cfs_quota,
        int(cfg.cpu_cfs_quota_period * 1_000_000),
        pod_pids_limit=cfg.pod_pids_limit,
        exclusive_cpus=resources.pod_has_exclusive_cpus,
        hugepage_sizes=hugepages.page_sizes(),
    )
    if pcm.hugetlb_unavailable():
        log.warning(
            "The node has hugepages (%s) but no hugetlb cgroup controller: "
            "hugepages requests are not limited on pod cgroups",
            ", ".join(pcm.hugepage_sizes),
        )
    return pcm


def _node_settings(node: Node) -> NodeSettings:
    """What of the node every container's config depends on."""
    cfg = node.config
    return NodeSettings(
        node_memory=machine_info().memory_capacity,
        seccomp_root=os.path.join(node.root_dir, "seccomp"),
        seccomp_default=cfg.seccomp_default,
        user_namespaces_support=node.features.enabled(Feature.UserNamespacesSupport),
        swap=node_swap_config(cfg.memory_swap.swap_behavior),
        container_logs_dir=legacy.CONTAINER_LOGS_DIR,
        hugepage_sizes=hugepages.page_sizes(),
        supplemental_groups_policy=node.features.enabled(Feature.SupplementalGroupsPolicy),
        cfs_period=int(cfg.cpu_cfs_quota_period * 1_000_000) if cfg.cpu_cfs_quota else None,
    )


def _pull_credentials(
    node: Node, pods: Pods, volumes: Volumes, plugins: LoadedPlugins | None
) -> PullCredentials:
    """The pod's pull secrets, the node's docker config, then the credential
    provider plugins (with service account tokens when they ask for them)."""
    return PullCredentials(
        PullSecretGetter(pods.secrets, node.recorder),
        NodeDockerKeyring(node.root_dir),
        (
            PluginKeyring(plugins, APIServiceAccounts(node.kube_client, volumes.tokens))
            if plugins is not None
            else None
        ),
    )


def build_runtime(
    node: Node,
    pods: Pods,
    volumes: Volumes,
    probes: ProbeManager,
    resources: ResourceManagers,
    services: tuple[RuntimeService, ImageService],
    setup: RuntimeSetup,
) -> Runtime:
    cfg = node.config
    runtime_service, image_service = services
    state = RuntimeState(runtime_service, image_service, node.clock)
    helper = _runtime_helper(node, pods, volumes, state)
    pod_cgroups = _pod_cgroups(cfg, resources)
    userns = _userns_manager(node, state)
    manager = RuntimeManager(
        runtime_service,
        image_service,
        helper,
        cfg.pod_logs_dir,
        identity=state,
        node=_node_settings(node),
        cgroups_per_qos=cfg.cgroups_per_qos,
        cgroup_root=cfg.cgroup_root,
        crash_backoff=setup.crash_backoff,
        image_backoff=setup.image_backoff,
        recorder=node.recorder,
        must_restart=probes.must_restart,
        is_started=probes.is_started,
        credentials=_pull_credentials(node, pods, volumes, setup.credential_plugins),
        runtime_classes=pods.runtime_classes,
        image_puller=ImagePuller.from_config(cfg),
        startup=pods.startup,
        container_resources=resources,
        actuation=pods.allocation if pods.allocation.enabled else None,
        pod_cgroups=pod_cgroups,
        userns=userns,
    )
    pleg = GenericPLEG(
        runtime_service, RelistDiffer(), pods.cache, manager.get_pod_status,
        cfg.pleg_relist_period, clock=node.clock,
    )  # fmt: skip
    evented = (
        EventedPLEG(runtime_service, manager, pleg, pods.cache)
        if node.features.enabled(Feature.EventedPLEG)
        else None
    )
    return Runtime(pod_cgroups, state, helper, manager, pleg, evented, userns)


# --------------------------------------------------------------- workers
@dataclass(frozen=True)
class Workers:
    pod_cgroups: PodContainerManager | None  # kubepods/<qos>/pod<uid>, cgroupfs driver
    syncer: KubeletPodSyncer
    workers: PodWorkers


def _resource_health(node: Node, resources: ResourceManagers) -> generate.ResourceHealth | None:
    """ResourceHealthStatus: containers' allocatedResourcesStatus from the device
    manager and (with DynamicResourceAllocation) the DRA drivers' health streams."""
    if not node.features.enabled(Feature.ResourceHealthStatus):
        return None
    return resources.allocated_resources_status


def build_workers(
    node: Node,
    pods: Pods,
    volumes: Volumes,
    probes: ProbeManager,
    runtime: Runtime,
    resources: ResourceManagers,
    registered: RegisteredNode,
) -> Workers:
    cfg, client = node.config, node.kube_client
    pod_cgroups = runtime.pod_cgroups
    # Static pods get mirror pods in cluster mode, owned by the Node once registered.
    mirror_client = MirrorClient(client, node.name, registered.uid) if client else None
    syncer = KubeletPodSyncer(
        node.root_dir, node.ips, runtime.manager, pods.status, probes, pods.manager,
        pods.cache, pods.work_queue, pods.admitter, volumes.manager,
        pod_cgroups=pod_cgroups, mirror_client=mirror_client,
        recorder=node.recorder, clock=node.clock, allocation=pods.allocation,
        userns=runtime.userns, dra=resources.dra,
        resource_health=_resource_health(node, resources),
        ready_to_start=node.features.enabled(Feature.PodReadyToStartContainersCondition),
        rro_supported=runtime.helper.rro.cached,
    )  # fmt: skip
    workers = PodWorkers(
        syncer, pods.cache, pods.work_queue, cfg.sync_frequency,
        on_terminated=pods.status.enqueue, clock=node.clock, states=pods.worker_states,
    )  # fmt: skip
    return Workers(pod_cgroups, syncer, workers)
