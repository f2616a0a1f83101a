"""The Kubelet's runtime side and its pod workers, with their builders: the
runtime manager and PLEG over the CRI, then the pod syncer and workers that
drive it. Built after the subsystems of kubelet_subsystems.py (node, pods,
resource managers, volumes, probes), from what those builders returned.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm import hugepages
from kubelet.cm.cgroup_manager import CgroupManager, PodContainerManager
from kubelet.cm.resource_managers import ResourceManagers
from kubelet.container.env import EnvContext
from kubelet.credentialprovider.plugin.plugin import APIServiceAccounts
from kubelet.credentialprovider.plugin.plugins import LoadedPlugins, PluginKeyring
from kubelet.credentialprovider.provider import NodeDockerKeyring
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.features import Feature
from kubelet.images.puller import ImagePuller
from kubelet.kubelet_node_status import RegisteredNode
from kubelet.kubelet_pods import PodRuntimeHelper, PullSecretGetter
from kubelet.kubelet_subsystems import Node, Pods, Volumes
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.kuberuntime_image import PullCredentials
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.kuberuntime.swap import node_swap_config
from kubelet.mirror_client import MirrorClient
from kubelet.network.dns import DNSConfigurer
from kubelet.nodestatus.machine import machine_info
from kubelet.pleg.differ import RelistDiffer
from kubelet.pleg.evented import EventedPLEG
from kubelet.pleg.generic import GenericPLEG
from kubelet.pod_sync import KubeletPodSyncer
from kubelet.pod_workers import PodWorkers
from kubelet.prober.prober_manager import ProbeManager
from kubelet.runtime_state import RuntimeState
from kubelet.status import generate
from kubelet.userns import idrange
from kubelet.userns.userns_manager import UsernsManager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeSetup:
    """The runtime manager's options the command (or a test) may set."""

    # --pod-infra-container-image: kept from image GC (else asked of the runtime).
    sandbox_image: str = ""
    crash_backoff: Backoff | None = None
    image_backoff: Backoff | None = None
    credential_plugins: LoadedPlugins | None = None


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
