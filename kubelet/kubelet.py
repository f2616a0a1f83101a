"""The Kubelet: pod sources, PLEG, pod workers and the syncLoop (pkg/kubelet/kubelet.go).

The syncLoop is one coroutine over config updates, PLEG events, the 1s sync
tick (pods due in the work queue) and the 2s housekeeping tick. Its handlers
only hand work to pod workers; nothing here costs O(all pods) per second
except the PLEG's relist.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson

from kubelet.active_pods import ActivePods
from kubelet.apis.config import KubeletConfiguration
from kubelet.client.rest import APIClient
from kubelet.cm.cgroup_manager import CgroupManager, PodContainerManager
from kubelet.cm.container_manager import ContainerManager
from kubelet.cm.cpumanager.topology import discover as discover_cpus
from kubelet.cm.resource_managers import (
    ResourceManagerConfig,
    apply_reserved_cpus,
    new_resource_managers,
    node_reservation,
)
from kubelet.cm.sysinfo import MachineTopology
from kubelet.cm.sysinfo import discover as discover_machine
from kubelet.config.apiserver import APIServerSource
from kubelet.config.config import Op, PodConfig, PodUpdate
from kubelet.config.file import FileSource
from kubelet.config.http import HTTPSource
from kubelet.container.cache import Cache
from kubelet.container.env import EnvContext
from kubelet.credentialprovider.plugin.plugin import APIServiceAccounts
from kubelet.credentialprovider.plugin.plugins import LoadedPlugins, PluginKeyring
from kubelet.credentialprovider.provider import NodeDockerKeyring
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.envvars import ServiceInformer
from kubelet.events import Recorder
from kubelet.eviction.eviction_manager import EvictionManager
from kubelet.features import Feature, FeatureGate
from kubelet.images.image_gc_manager import ImageGCManager
from kubelet.images.puller import ImagePuller
from kubelet.kubelet_getters import KubeletHost
from kubelet.kubelet_pods import (
    DATA_DIR_MODE,
    PodRuntimeHelper,
    PullSecretGetter,
    setup_data_dirs,
)
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.gc import ContainerGC
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.lifecycle.predicate import Admitter, Rejection
from kubelet.logs.container_log_manager import ContainerLogManager
from kubelet.mirror_client import MirrorClient, is_mirror
from kubelet.network.dns import DNSConfigurer
from kubelet.nodeshutdown.manager import NodeShutdownManager
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import max_pods
from kubelet.objectcache import CONFIGMAP, SECRET, WatchingObjectManager
from kubelet.pleg.differ import RelistDiffer
from kubelet.pleg.evented import EventedPLEG
from kubelet.pleg.generic import GenericPLEG
from kubelet.pleg.pleg import PodLifecycleEvent
from kubelet.pod_sync import KubeletPodSyncer
from kubelet.pod_workers import PodWork, PodWorkers, UpdateType
from kubelet.podmanager import PodManager
from kubelet.prober.prober import Prober
from kubelet.prober.prober_manager import ProbeManager
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassManager
from kubelet.server.checkpoint import CHECKPOINTS_DIR
from kubelet.stats.cadvisor import cadvisor_registry
from kubelet.stats.ephemeral import EphemeralStorageStats
from kubelet.stats.provider import StatsProvider, resource_registry
from kubelet.stats.volumes import VolumeStatsCalculator
from kubelet.status import generate, generation
from kubelet.status.disruption import KubeletTermination
from kubelet.status.status_manager import StatusManager
from kubelet.sysctl import SysctlAllowlist
from kubelet.token.manager import TokenManager
from kubelet.types import (
    API_SOURCE,
    FILE_SOURCE,
    HTTP_SOURCE,
    Pod,
    full_name,
    is_static,
    name,
    namespace,
    object_ref,
    qos_class,
    uid,
)
from kubelet.util import filesystem
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.quantity import cpu_millis, to_bytes
from kubelet.util.workqueue import WorkQueue
from kubelet.volume import VolumeHost
from kubelet.volume.configmap import ConfigMapPlugin
from kubelet.volume.downwardapi import DownwardAPIPlugin
from kubelet.volume.emptydir import EmptyDirPlugin
from kubelet.volume.hostpath import HostPathPlugin
from kubelet.volume.projected import ProjectedPlugin
from kubelet.volume.pvc import PVCPlugin
from kubelet.volume.secret import SecretPlugin
from kubelet.volumemanager.manager import VolumeManagerImpl
from kubelet.volumemanager.mountutil import remove_all_one_filesystem

log = logging.getLogger(__name__)


SYNC_TICK = 1.0
HOUSEKEEPING_PERIOD = 2.0
# maxWaitForContainerRuntime: no passed runtime check for this long = runtime down.
RUNTIME_DOWN_AFTER = 30.0


class Kubelet:
    """Composition root and loops: builds the components, feeds the syncLoop
    from the pod sources, the PLEG and the timers, and hands each pod's work
    to its pod worker. What is done to a pod lives in pod_sync.py."""

    def __init__(
        self,
        config: KubeletConfiguration,
        node_name: str,
        root_dir: str,
        runtime_service: RuntimeService,
        image_service: ImageService,
        node_ip: str | None = None,
        recorder: Recorder | None = None,
        crash_backoff: Backoff | None = None,
        image_backoff: Backoff | None = None,
        kube_client: APIClient | None = None,
        allocatable: dict[str, str] | None = None,
        node_uid: Callable[[], str | None] = lambda: None,
        clock: Clock = REAL_CLOCK,
        sandbox_image: str = "",
        machine_topology: MachineTopology | None = None,
        container_manager: ContainerManager | None = None,
        credential_plugins: LoadedPlugins | None = None,
    ) -> None:
        self.config = config
        self.node_name = node_name
        self.root_dir = root_dir
        self.runtime = runtime_service
        self.images = image_service
        self.node_ips = [node_ip] if node_ip else ["127.0.0.1"]
        self.recorder = recorder
        self.clock = clock
        # --pod-infra-container-image: kept from image GC (else asked of the runtime).
        self.sandbox_image = sandbox_image
        self.node_ref = {"kind": "Node", "name": node_name, "uid": node_name, "namespace": ""}
        self.features = FeatureGate(config.feature_gates)
        self.evented: EventedPLEG | None = None
        self.pod_config = PodConfig()
        # configMaps and secrets of the node's pods: one watch per referenced object.
        self.configmaps = WatchingObjectManager(CONFIGMAP, kube_client, config.sync_frequency)
        self.secrets = WatchingObjectManager(SECRET, kube_client, config.sync_frequency)
        self.pod_manager = PodManager([self.configmaps, self.secrets])
        self.services = ServiceInformer(kube_client) if kube_client is not None else None
        self.runtime_classes = RuntimeClassManager(kube_client) if kube_client is not None else None
        self.cache = Cache()
        self.work_queue = WorkQueue()
        # Cluster mode: the API server is a pod source, pod statuses are written
        # there, and static pods get mirror pods. None of it in standalone mode.
        self.kube_client = kube_client
        self.api_source: APIServerSource | None = None
        mirror_client: MirrorClient | None = None
        if kube_client is not None:
            self.api_source = APIServerSource(kube_client, node_name, self.pod_config)
            mirror_client = MirrorClient(kube_client, node_name, node_uid)
        self.status_manager = StatusManager(
            kube_client,
            api_pod=self.api_source.get if self.api_source else None,
            desired_pod=self.pod_manager.get,
            mirror_of=self.pod_manager.get_mirror,
            can_delete=lambda u: not self.pod_workers.could_have_running_containers(u),
            tracking=self.features.enabled(generation.GATE),
        )
        alloc = allocatable or {}
        self.admitter = Admitter(
            int(alloc.get("pods", max_pods(config, machine_info().num_cores))),
            cpu_millis(alloc.get("cpu", "1000000")),
            to_bytes(alloc.get("memory", str(machine_info().memory_capacity))),
        )
        self.rejected: set[str] = set()
        # CPU, memory and topology managers: admission allocates, container
        # creation pins (cpuset_cpus/mems), a reconcile loop keeps pools in line.
        # They reserve what the container manager's node allocatable reserves.
        # ContainerManagerError (a setting or state file they refuse) is fatal.
        topo = machine_topology or discover_machine()
        reserved_cpus = apply_reserved_cpus(config, discover_cpus(topo))
        reservation = (
            container_manager.reservation()
            if container_manager is not None
            else node_reservation(config, topo)
        )
        # Their state files are written into the root dir now: made as
        # setupDataDirs makes it (0750), which upstream runs before them.
        filesystem.mkdir_all(root_dir, DATA_DIR_MODE)
        self.active_pods = ActivePods(
            self.pod_manager, self.rejected, lambda: self.pod_workers, self.status_manager.get,
            self.cache,
        )  # fmt: skip
        self.resource_managers = new_resource_managers(
            config,
            ResourceManagerConfig(topo, reservation, root_dir, reserved_cpus),
            self.features,
            self.active_pods,
            lambda: self.sources_ready.is_set() or not self._sources,
        )
        # Safe sysctls of this kernel plus allowedUnsafeSysctls (validated at startup).
        self.sysctls = SysctlAllowlist.for_node(config.allowed_unsafe_sysctls)
        # Pod and node usage from the Cython parsers: /stats/summary, /metrics/resource.
        # Volume usage per pod, measured every volumeStatsAggPeriod off the loop.
        self.volume_stats = VolumeStatsCalculator(
            lambda: list(self.pod_manager.uids()),
            lambda u: {
                n: v.host_path for n, v in self.volume_manager.get_mounted_volumes(u).items()
            },
            os.path.join(root_dir, "pods"),
            period=config.volume_stats_agg_period,
        )
        self.stats = StatsProvider(
            self.pod_manager.pods,
            root_dir,
            node_name,
            config.cgroup_root,
            volume_usage=self.volume_stats.usage,
            pod_status=lambda u: self.cache.get(u)[0],
            container_resources=lambda p, c: self.runtime_manager.resources(p, c),
        )
        self.resource_registry = resource_registry(self.stats)
        self.cadvisor_registry = cadvisor_registry(self.stats, machine_info())
        # Node-pressure eviction: conditions, one eviction per cycle, admission;
        # local storage limits measured for the pods that have them.
        ephemeral = EphemeralStorageStats(
            runtime_service, config.pod_logs_dir, os.path.join(root_dir, "pods"),
            lambda u: self.cache.get(u)[0], self._volume_bytes,
        )  # fmt: skip
        self.eviction = EvictionManager(
            config, self._active_pods, self._evict_pod, self._pods_memory, root_dir,
            recorder=recorder, volume_usage=self._volume_bytes,
            local_storage_usage=ephemeral.measure,
        )  # fmt: skip
        self.node_images: list[dict[str, Any]] = []
        self.runtime_version = ""
        self.runtime_error: str | None = "container runtime status check may not have completed yet"
        self._runtime_synced: float | None = None  # clock.monotonic() of the last passed check
        # Probes: readiness decides `ready`, liveness and startup failures restart.
        self.probes = ProbeManager(
            Prober(runtime_service), self.status_manager.get, self._probe_changed, recorder
        )
        node_alloc: dict[str, str] = dict(alloc)
        tokens = TokenManager(kube_client) if kube_client is not None else None
        self.tokens = tokens
        self.volume_manager = VolumeManagerImpl(
            VolumeHost(root_dir, node_name),
            [
                ConfigMapPlugin(self.configmaps),
                SecretPlugin(self.secrets),
                DownwardAPIPlugin(lambda: node_alloc),
                ProjectedPlugin(self.configmaps, self.secrets, tokens, lambda: node_alloc),
                EmptyDirPlugin(lambda: to_bytes(node_alloc.get("memory", "0"))),
                HostPathPlugin(),
                PVCPlugin(kube_client.get if kube_client is not None else None),
            ],
            on_pod_ready=self._volumes_ready,
            recorder=recorder.event if recorder is not None else None,
            clock=clock,
        )
        self.runtime_helper = PodRuntimeHelper(
            root_dir,
            DNSConfigurer(
                config.cluster_dns,
                config.cluster_domain,
                config.resolv_conf,
                node_ips=self.node_ips,
                recorder=recorder,
                node_ref=self.node_ref,
            ),
            config.cluster_domain,
            EnvContext(
                host_ips=tuple(self.node_ips),
                node_ips=tuple(self.node_ips),
                node_allocatable=node_alloc,
                configmaps=self.configmaps if kube_client is not None else None,
                secrets=self.secrets if kube_client is not None else None,
                services=self.services,
            ),
            self.volume_manager,
        )
        self.runtime_manager = RuntimeManager(
            runtime_service,
            image_service,
            self.runtime_helper,
            config.pod_logs_dir,
            node_memory=machine_info().memory_capacity,
            cgroups_per_qos=config.cgroups_per_qos,
            cgroup_root=config.cgroup_root,
            crash_backoff=crash_backoff,
            image_backoff=image_backoff,
            recorder=recorder,
            must_restart=self.probes.must_restart,
            is_started=self.probes.is_started,
            seccomp_root=os.path.join(root_dir, "seccomp"),
            seccomp_default=config.seccomp_default,
            pull_secrets=PullSecretGetter(self.secrets, recorder),
            runtime_classes=self.runtime_classes,
            node_keyring=NodeDockerKeyring(root_dir),
            credential_plugins=PluginKeyring(
                credential_plugins, APIServiceAccounts(kube_client, tokens)
            )
            if credential_plugins is not None
            else None,
            image_puller=ImagePuller.from_config(config),
            container_resources=self.resource_managers,
            container_logs_dir=legacy.CONTAINER_LOGS_DIR,
        )
        self.pleg = GenericPLEG(
            runtime_service,
            RelistDiffer(),
            self.cache,
            self.runtime_manager.get_pod_status,
            config.pleg_relist_period,
            clock=clock,
        )
        # The kubelet's own pod cgroups (kubepods/<qos>/pod<uid>), cgroupfs driver.
        self.pod_cgroups = (
            PodContainerManager(
                CgroupManager(config.cgroup_root),
                config.cpu_cfs_quota,
                int(config.cpu_cfs_quota_period * 1_000_000),
                pod_pids_limit=config.pod_pids_limit,
                exclusive_cpus=self.resource_managers.pod_has_exclusive_cpus,
            )
            if config.cgroups_per_qos
            else None
        )
        self.pod_syncer = KubeletPodSyncer(
            root_dir,
            self.node_ips,
            self.runtime_manager,
            self.status_manager,
            self.probes,
            self.pod_manager,
            self.cache,
            self.work_queue,
            self.admitter,
            self.volume_manager,
            pod_cgroups=self.pod_cgroups,
            mirror_client=mirror_client,
            recorder=recorder,
            clock=clock,
        )
        self.pod_workers = PodWorkers(
            self.pod_syncer,
            self.cache,
            self.work_queue,
            config.sync_frequency,
            on_terminated=self.status_manager.enqueue,
            clock=clock,
        )
        # ContainerCheckpoint: where POST /checkpoint/... writes archives.
        self.checkpoints_dir = (
            os.path.join(root_dir, CHECKPOINTS_DIR)
            if self.features.enabled(Feature.ContainerCheckpoint)
            else None
        )
        # Set to have the node status reported now rather than on its period.
        self.node_status_due = asyncio.Event()
        # Graceful node shutdown; None when its gate is off or no period is set.
        self.shutdown = NodeShutdownManager.from_config(
            config, self.features, self._kill_pod_now, self._pods_for_shutdown, root_dir,
            on_status_change=self.node_status_due.set, node_event=self._node_event,
        )  # fmt: skip
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._sources: list[str] = []
        self._orphans_killing: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.last_loop = 0.0
        self.sources_ready = asyncio.Event()
        # What the servers read of this node.
        self.host = KubeletHost(
            self.pod_manager,
            self.status_manager,
            runtime_service,
            self.stats,
            self.resource_registry,
            self.cadvisor_registry,
            sync_frequency=float(config.sync_frequency),
            streaming_idle_timeout=float(config.streaming_connection_idle_timeout),
            last_loop=lambda: self.last_loop,
            pleg_healthy=self.pleg.healthy,
            clock=clock,
        )

    # ------------------------------------------------------------ lifecycle
    def _start_sources(self) -> None:
        cfg = self.config
        if cfg.static_pod_path:
            src = FileSource(
                cfg.static_pod_path, self.node_name, cfg.file_check_frequency, self.pod_config
            )
            self._sources.append(FILE_SOURCE)
            self._tasks.append(asyncio.create_task(src.run(self._stop), name="file-source"))
        if cfg.static_pod_url:
            http = HTTPSource(
                cfg.static_pod_url,
                cfg.static_pod_url_header,
                self.node_name,
                cfg.http_check_frequency,
                self.pod_config,
            )
            self._sources.append(HTTP_SOURCE)
            self._tasks.append(asyncio.create_task(http.run(self._stop), name="http-source"))
        if self.api_source is not None:
            self._sources.append(API_SOURCE)
            self._tasks.append(
                asyncio.create_task(self.api_source.run(self._stop), name="api-source")
            )
            self._tasks.append(
                asyncio.create_task(self.status_manager.run(self._stop), name="status-manager")
            )

    async def _runtime_name(self) -> None:
        for _ in range(600):
            try:
                v = await self.runtime.version()
                self.runtime_manager.runtime_name = v.runtime_name or "cri"
                self.runtime_version = f"{v.runtime_name}://{v.runtime_version}"
                log.info(
                    "Container runtime %s %s (CRI %s)",
                    v.runtime_name,
                    v.runtime_version,
                    v.runtime_api_version,
                )
                return
            except Exception as err:
                log.warning("Container runtime not answering yet: %s", err)
                try:
                    await asyncio.wait_for(self._stop.wait(), 1.0)
                    return
                except TimeoutError:
                    pass

    async def _start_core(self) -> None:
        """What both run() and run_once() need: the pod dirs, the QoS cgroups,
        the runtime's name, the pod sources and the PLEG."""
        await asyncio.get_running_loop().run_in_executor(
            None, setup_data_dirs, self.root_dir, self.config.pod_logs_dir
        )
        try:
            os.makedirs(legacy.CONTAINER_LOGS_DIR, 0o755, exist_ok=True)
        except OSError as err:
            log.warning("No legacy container log links: %s: %s", legacy.CONTAINER_LOGS_DIR, err)
        if self.checkpoints_dir is not None:
            os.makedirs(self.checkpoints_dir, mode=0o700, exist_ok=True)
        if self.pod_cgroups is not None:
            # Fatal as upstream: pods cannot be placed without the QoS tree.
            await asyncio.get_running_loop().run_in_executor(None, self.pod_cgroups.setup_qos)
        await self._runtime_name()
        # Volumes already on disk (a restart, kill -9 included) are adopted
        # before any pod is synced, so they are not set up again.
        await self.volume_manager.reconstruct()
        self._tasks.append(
            asyncio.create_task(self.volume_manager.run(self._stop), name="volume-manager")
        )
        if self.services is not None:
            self._tasks.append(asyncio.create_task(self.services.run(self._stop), name="services"))
        if self.runtime_classes is not None:
            self._tasks.append(
                asyncio.create_task(self.runtime_classes.run(self._stop), name="runtimeclasses")
            )
        self._start_sources()
        self._tasks.append(asyncio.create_task(self.pleg.run(self._stop), name="pleg"))

    async def _stop_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pod_workers.stop()
        await self.runtime_manager.close()  # the hook runner's HTTP session
        await self.configmaps.close()
        await self.secrets.close()

    def _node_event(self, etype: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(self.node_ref, etype, reason, message)

    def _pod_content_needed(self, pod_uid: str) -> bool:
        """False once the pod is gone from every source and its worker is done
        (ShouldPodContentBeRemoved upstream): its dead containers may go."""
        return self.pod_manager.get(pod_uid) is not None or (
            self.pod_workers.could_have_running_containers(pod_uid)
        )

    async def _runtime_sandbox_image(self) -> str:
        """The pause image the runtime uses (containerd reports it in its verbose
        status config), so image GC never removes it: containerd 1.6 does not
        mark it pinned, and without a registry it could not be pulled back."""
        try:
            info = (await self.runtime.status(verbose=True)).info
            return str(orjson.loads(info.get("config", "{}")).get("sandboxImage", ""))
        except Exception as err:
            log.warning("Could not learn the runtime's sandbox image: %s", err)
            return ""

    def _start_garbage_collection(self, sandbox_image: str) -> None:
        """StartGarbageCollection, container log rotation."""
        container_gc = ContainerGC(
            self.runtime,
            self._pod_content_needed,
            self.config.pod_logs_dir,
            sources_ready=self.sources_ready.is_set,
            node_event=self._node_event,
            container_logs_dir=legacy.CONTAINER_LOGS_DIR,
        )
        image_gc = ImageGCManager.from_config(
            self.config,
            self.images,
            self.runtime,
            sandbox_image=sandbox_image,
            node_event=self._node_event,
        )
        logs = ContainerLogManager.from_config(self.config, self.runtime)
        for task_name, coro in (
            ("container-gc", container_gc.run(self._stop)),
            ("image-gc", image_gc.run(self._stop)),
            ("container-log-manager", logs.run(self._stop)),
        ):
            self._tasks.append(asyncio.create_task(coro, name=task_name))

    async def run(self) -> None:
        await self._start_core()
        self._start_garbage_collection(self.sandbox_image or await self._runtime_sandbox_image())
        self._tasks.append(asyncio.create_task(self._runtime_status_loop(), name="runtime-up"))
        self._tasks.append(asyncio.create_task(self.eviction.run(self._stop), name="eviction"))
        if self.shutdown is not None:
            self._tasks.append(
                asyncio.create_task(self.shutdown.run(self._stop), name="node-shutdown")
            )
        self._tasks.append(
            asyncio.create_task(
                self.resource_managers.run(self._stop, self.runtime), name="cpu-manager"
            )
        )
        self._tasks.append(
            asyncio.create_task(self.volume_stats.run(self._stop), name="volume-stats")
        )
        if self.features.enabled(Feature.EventedPLEG):
            self.evented = EventedPLEG(self.runtime, self.runtime_manager, self.pleg, self.cache)
            self._tasks.append(
                asyncio.create_task(self.evented.run(self._stop), name="evented-pleg")
            )
        try:
            await self._sync_loop()
        finally:
            await self._stop_tasks()
            await self.probes.stop()

    async def stop(self) -> None:
        self._stop.set()

    async def _refresh_images(self) -> None:
        """The node's image list for the Node status, biggest first (as upstream)."""
        try:
            images = await self.images.list_images()
        except Exception as err:
            log.debug("listing images failed: %s", err)
            return
        sized = []
        for im in images:
            names = [*im.repo_digests, *im.repo_tags]
            if names:
                sized.append((int(im.size), names))
        sized.sort(key=lambda x: -x[0])
        self.node_images = [{"names": n, "sizeBytes": size} for size, n in sized]

    async def _runtime_status_loop(self) -> None:
        """updateRuntimeUp: every 5 s, ask the runtime whether it is ready; the
        image list is refreshed every 30 s."""
        rounds = 0
        while not self._stop.is_set():
            if rounds % 6 == 0:
                await self._refresh_images()
            rounds += 1
            try:
                st = await self.runtime.status()
                bad = [
                    f"{c.type}={c.status} ({c.reason}: {c.message})"
                    for c in st.status.conditions
                    if c.type in ("RuntimeReady", "NetworkReady") and not c.status
                ]
                self.runtime_error = (
                    "container runtime is not ready: " + ", ".join(bad) if bad else None
                )
                self._runtime_synced = self.clock.monotonic()
            except Exception as err:
                # As upstream's runtimeState: one failed check is logged; the node
                # turns NotReady only once no check has passed for 30 s, so a
                # runtime restart of a few seconds does not flap it.
                log.error("Container runtime sanity check failed: %s", err)
                last = self._runtime_synced
                if last is not None and self.clock.monotonic() - last >= RUNTIME_DOWN_AFTER:
                    self.runtime_error = f"container runtime is down: {err}"
            try:
                await asyncio.wait_for(self._stop.wait(), 5.0)
            except TimeoutError:
                pass

    def readiness(self) -> str | None:
        """Why the node is not Ready, or None (runtime and PLEG health)."""
        shutdown = self.shutdown.shutdown_status() if self.shutdown is not None else None
        return self.runtime_error or self.pleg.healthy() or shutdown

    # ------------------------------------------------------------- syncLoop
    async def _sync_loop(self) -> None:
        updates = asyncio.ensure_future(self.pod_config.updates.get())
        events = asyncio.ensure_future(self.pleg.events.get())
        stopper = asyncio.ensure_future(self._stop.wait())
        clock = self.clock
        next_sync = clock.monotonic() + SYNC_TICK
        next_house = clock.monotonic() + HOUSEKEEPING_PERIOD
        try:
            while not self._stop.is_set():
                now = clock.monotonic()
                self.last_loop = now
                timeout = max(0.0, min(next_sync, next_house) - now)
                done, _ = await asyncio.wait(
                    {updates, events, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if updates in done:
                    self.handle_update(updates.result())
                    while not self.pod_config.updates.empty():
                        self.handle_update(self.pod_config.updates.get_nowait())
                    updates = asyncio.ensure_future(self.pod_config.updates.get())
                if events in done:
                    # Drain what the PLEG sent in one go: one wakeup per event would
                    # let a busy relist fill the channel and drop events.
                    self.handle_pleg_event(events.result())
                    while not self.pleg.events.empty():
                        self.handle_pleg_event(self.pleg.events.get_nowait())
                    events = asyncio.ensure_future(self.pleg.events.get())
                now = clock.monotonic()
                if now >= next_sync:
                    next_sync = now + SYNC_TICK
                    self.handle_sync_tick()
                if now >= next_house:
                    next_house = now + HOUSEKEEPING_PERIOD
                    await self.housekeeping()
        finally:
            for f in (updates, events, stopper):
                f.cancel()

    def handle_update(self, u: PodUpdate) -> None:
        self._handle_pods(u)
        # Ready once this update is handled, as upstream (AddSource after the
        # handler): admitting the first pods of a restart must not see the
        # others as gone (the CPU and memory managers would release their state).
        if u.source in self._sources and u.source in self.pod_config.sources_seen:
            if all(s in self.pod_config.sources_seen for s in self._sources):
                self.sources_ready.set()

    def _handle_pods(self, u: PodUpdate) -> None:
        for pod in u.pods:
            if is_mirror(pod):
                self._handle_mirror(u.op, pod)
                continue
            pu = uid(pod)
            if u.op is Op.ADD and pod["metadata"].get("deletionTimestamp"):
                # Seen for the first time while already being deleted (say, after a
                # kubelet restart): stop whatever runs for it, never start it.
                self.pod_manager.add_or_update(pod)
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
                self.status_manager.enqueue(pu)
            elif u.op is Op.ADD:
                self.pod_syncer.pod_seen(pu)
                self.pod_manager.add_or_update(pod)
                rejection = self._admit(pod)
                if rejection is not None:
                    self._reject(pod, rejection)
                    continue
                self.pod_workers.update_pod(PodWork(pod, UpdateType.CREATE))
            elif u.op is Op.UPDATE:
                self.pod_manager.add_or_update(pod)
                if pu not in self.rejected:
                    self.pod_workers.update_pod(PodWork(pod, UpdateType.UPDATE))
            elif u.op is Op.RECONCILE:
                # Only the API status changed (mostly our own writes coming back):
                # the status manager reconciles drift itself; a sync is due only
                # when a readiness gate's condition moved (HandlePodReconcile).
                self.pod_manager.add_or_update(pod)
                if pu not in self.rejected and generate.need_to_reconcile_pod_readiness(pod):
                    self.pod_workers.update_pod(PodWork(pod, UpdateType.UPDATE))
            elif u.op is Op.DELETE:
                self.pod_manager.add_or_update(pod)
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                if pu not in self.rejected:  # a refused pod never ran: nothing to kill
                    self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
                # A pod with nothing running is deleted from the API right away.
                self.status_manager.enqueue(pu)
            elif u.op is Op.REMOVE:
                self.pod_manager.remove(pod)
                self.admitter.release(pu)
                self.resource_managers.remove_pod(pu)
                self.rejected.discard(pu)
                self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, removed=True))

    def _admit(self, pod: Pod) -> Rejection | None:
        """canAdmitPod: pods that already finished are not counted nor re-admitted."""
        st = (pod.get("status") or {}).get("phase")
        if st in ("Succeeded", "Failed"):
            return None
        pressure = self.eviction.admit(pod)
        if pressure is not None:
            return pressure
        if self.shutdown is not None and (refused := self.shutdown.admit(pod)) is not None:
            return refused
        forbidden = self.sysctls.admit(pod)
        if forbidden is not None:
            return forbidden
        # The topology manager allocates CPUs and memory (before the fit check, as upstream).
        unaligned = self.resource_managers.admit(pod)
        if unaligned is not None:
            return unaligned
        try:
            return self.admitter.admit(uid(pod), pod)
        except ValueError as err:
            return Rejection("UnexpectedAdmissionError", f"invalid resource requests: {err}")

    def _reject(self, pod: Pod, r: Rejection) -> None:
        u = uid(pod)
        self.rejected.add(u)
        log.warning("Pod %s/%s rejected: %s: %s", namespace(pod), name(pod), r.reason, r.message)
        if self.recorder is not None:
            self.recorder.event(object_ref(pod), "Warning", r.reason, r.message)
        # rejectPod: only the QoS class is kept; startTime as any first status has.
        self.status_manager.set_pod_status(
            u,
            {
                "phase": "Failed",
                "reason": r.reason,
                "message": f"Pod was rejected: {r.message}",
                "conditions": [],
                "qosClass": qos_class(pod),
                "startTime": generate.now(),
            },
            pod,
        )

    def _handle_mirror(self, op: Op, mirror: Pod) -> None:
        """Mirror pods are never run; their static pod is synced so it can fix them."""
        if op is Op.REMOVE:
            self.pod_manager.remove_mirror(mirror)
        else:
            self.pod_manager.set_mirror(mirror)
        static = self.pod_manager.get_by_full_name(full_name(mirror))
        if static is not None and is_static(static):
            self.pod_workers.update_pod(PodWork(static, UpdateType.SYNC))
            self.status_manager.enqueue(uid(static))

    def _active_pods(self) -> list[Pod]:
        """Admitted pods that are not finished or being killed."""
        out = []
        for p in self.pod_manager.pods():
            u = uid(p)
            if (
                u in self.rejected
                or self.pod_syncer.is_evicted(u)
                or self.pod_workers.is_terminating(u)
            ):
                continue
            st = self.status_manager.get(u) or {}
            if st.get("phase") not in ("Succeeded", "Failed"):
                out.append(p)
        return out

    def _volume_bytes(self, pod_uid: str) -> dict[str, int]:
        """Bytes in each of the pod's volumes, from the volume stats' last pass."""
        return {v.name: v.used_bytes for v in self.volume_stats.usage(pod_uid)}

    def _pods_memory(self) -> dict[str, int]:
        """Working set per pod UID from one stats pass (for eviction ranking):
        memory.current and memory.stat of each pod cgroup, nothing else."""
        return self.stats.pod_working_sets()

    async def _evict_pod(
        self, pod: Pod, grace: int, reason: str, message: str,
        condition: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        u = uid(pod)
        self.pod_syncer.mark_evicted(u, reason, message)
        self.admitter.release(u)
        old = self.status_manager.get(u) or {}
        status = generate.failed_status(
            old, pod, reason, message, condition, self.status_manager.tracking
        )
        self.status_manager.set_pod_status(u, status, pod)
        self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))

    async def _kill_pod_now(self, pod: Pod, grace: int, why: KubeletTermination) -> None:
        """killPodNow: stop the pod with this grace period and final status;
        returns once its containers are stopped, raises TimeoutError when that
        takes more than 1.5 x grace (at least 10 s)."""
        u = uid(pod)
        self.pod_syncer.mark_terminated_by_kubelet(u, why)
        self.admitter.release(u)
        self.pod_workers.update_pod(PodWork(pod, UpdateType.KILL, grace=grace))
        if not await self.pod_workers.wait_terminated(u, max(grace + grace // 2, 10)):
            msg = "Container runtime did not kill the pod within specified grace period."
            if self.recorder is not None:
                self.recorder.event(object_ref(pod), "Warning", "ExceededGracePeriod", msg)
            raise TimeoutError("timeout waiting to kill pod")

    def _pods_for_shutdown(self) -> list[Pod]:
        """Admitted pods whose containers may still run, those being killed
        included (a shutdown may shorten their grace period)."""
        workers = self.pod_workers
        return [
            p for p in self.pod_manager.pods()
            if uid(p) not in self.rejected and workers.could_have_running_containers(uid(p))
        ]  # fmt: skip

    def _volumes_ready(self, pod_uid: str) -> None:
        """Every volume of the pod is set up: sync it now, not on its next retry."""
        pod = self.pod_manager.get(pod_uid)
        if pod is not None:
            self.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))

    def _probe_changed(self, pod_uid: str) -> None:
        pod = self.pod_manager.get(pod_uid)
        if pod is not None:
            self.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))

    def handle_pleg_event(self, ev: PodLifecycleEvent) -> None:
        pod = self.pod_manager.get(ev.pod_uid)
        if pod is not None:
            self.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))

    def handle_sync_tick(self) -> None:
        for u in self.work_queue.get_work():
            pod = self.pod_manager.get(u)
            if pod is not None:
                self.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))

    async def housekeeping(self) -> None:
        """HandlePodCleanups: stop what no source wants any more, clean up after it."""
        desired = self.pod_manager.uids()
        for u in self.pod_workers.known() - desired:
            st = self.pod_workers.states.get(u)
            if st is not None and not st.removed:
                self.pod_workers.update_pod(PodWork(st.pod, UpdateType.KILL, removed=True))
        if not self.sources_ready.is_set() and self._sources:
            return  # never judge runtime pods before every source has spoken
        workers = self.pod_workers.known()
        for u in self.pleg.differ.pod_ids():
            if u and u not in desired and u not in workers and u not in self._orphans_killing:
                self._orphans_killing.add(u)
                task = asyncio.create_task(self._kill_orphan(u))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        # Pod dirs of pods that are gone, once the volume manager has torn their
        # volumes down (it answers with the dirs that hold no volume any more).
        removable = await self.volume_manager.cleanup_orphaned_pods(desired | workers)
        if removable:
            await asyncio.get_running_loop().run_in_executor(None, self._remove_pod_dirs, removable)
        if self.pod_cgroups is not None:
            # Cgroups of pods that are gone, including what runtimes leave behind.
            pc = self.pod_cgroups
            keep = desired | workers | self._orphans_killing
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [pc.destroy_name(n) for n in pc.orphans(keep)]
            )
        for m in self.pod_manager.mirrors():
            static = self.pod_manager.get_by_full_name(full_name(m))
            if static is None or not is_static(static):
                self._spawn(self.pod_syncer.delete_orphaned_mirror(m))
        self.runtime_manager.crash_backoff.gc()
        self.runtime_manager.image_backoff.gc()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _kill_orphan(self, u: str) -> None:
        try:
            status = await self.runtime_manager.get_pod_status(u)
            log.info("Killing runtime pod %s (%s) that no source wants", u, status.name)
            await self.runtime_manager.kill_pod(None, status, None, remove=True)
            self.cache.delete(u)
        except Exception as err:
            log.warning("Failed to kill orphaned pod %s: %s", u, err)
        finally:
            self._orphans_killing.discard(u)

    def _remove_pod_dirs(self, uids: list[str]) -> None:
        for u in uids:
            # Never through a mount point: one left under a pod dir may be a hostPath.
            try:
                remove_all_one_filesystem(os.path.join(self.root_dir, "pods", u))
            except OSError as err:
                log.warning("Failed removing the directory of pod %s: %s", u, err)

    # -------------------------------------------------------------- runonce
    async def run_once(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """--runonce: start the static pods, wait until each runs or ends, report."""
        await self._start_core()
        loop_task = asyncio.create_task(self._sync_loop())
        try:
            deadline = self.clock.monotonic() + timeout
            while self.clock.monotonic() < deadline:
                await asyncio.sleep(0.2)
                if not self.sources_ready.is_set() and self._sources:
                    continue
                pods = self.host.get_pods()
                phases = [p.get("status", {}).get("phase") for p in pods]
                if all(ph in ("Running", "Succeeded", "Failed") for ph in phases):
                    return pods
            return self.host.get_pods()
        finally:
            self._stop.set()
            await asyncio.gather(loop_task, return_exceptions=True)
            await self._stop_tasks()
