"""Assemble the node: CRI clients from Dependencies (or the configured
endpoints) and the Kubelet with its loops (RunKubelet / createAndInitKubelet).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubelet.cm.container_manager import ContainerManager, NodeConfig
from kubelet.cm.interfaces import ContainerManagerError
from kubelet.cmd.options import KubeletServer
from kubelet.credentialprovider.plugin.plugins import LoadedPlugins, load_plugins
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.dependencies import Dependencies
from kubelet.features import Feature, FeatureGate
from kubelet.kubelet import Kubelet
from kubelet.kubelet_node_status import NodeStatusManager
from kubelet.kubelet_runtime_subsystems import RuntimeSetup
from kubelet.kubelet_subsystems import NodeSetup
from kubelet.nodestatus.setters import NodeInputs
from kubelet.types import ObjectReference
from kubelet.version import KUBERNETES_VERSION

log = logging.getLogger("kubelet")

# Run in reverse order at exit; one that returns a coroutine is awaited.
Cleanup = Callable[[], object]


def build_cri(s: KubeletServer, deps: Dependencies) -> tuple[RuntimeService, ImageService]:
    """Fill in the runtime and image services that the caller did not inject."""
    cfg = s.config
    if deps.runtime_service is None or deps.image_service is None:
        from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService

        timeout = cfg.runtime_request_timeout
        if deps.runtime_service is None:
            deps.runtime_service = RemoteRuntimeService(cfg.container_runtime_endpoint, timeout)
        if deps.image_service is None:
            endpoint = cfg.image_service_endpoint or cfg.container_runtime_endpoint
            deps.image_service = RemoteImageService(endpoint, timeout)
    return deps.runtime_service, deps.image_service


CRI_CONFIG_ATTEMPTS, CRI_CONFIG_RETRY = 3, 2.0


async def cgroup_driver_from_cri(s: KubeletServer, runtime: RuntimeService) -> None:
    """KubeletCgroupDriverFromCRI (GA): the runtime's RuntimeConfig names the
    cgroup driver, which then replaces cgroupDriver; a runtime that does not
    implement it (containerd 1.6) leaves the configured one. Raises
    ContainerManagerError when the runtime cannot be asked."""
    resp: pb.RuntimeConfigResponse | None = None
    for attempt in range(CRI_CONFIG_ATTEMPTS):
        try:
            resp = await runtime.runtime_config()
            break
        except errors.UnimplementedError:
            log.info(
                "CRI implementation should be updated to support RuntimeConfig. Falling back "
                "to using cgroupDriver from kubelet config."
            )
            return
        except errors.CRIError as err:
            # Likely a runtime still starting: give it a little more time.
            if attempt == CRI_CONFIG_ATTEMPTS - 1:
                raise ContainerManagerError(f"failed to get the runtime's config: {err}") from err
            await asyncio.sleep(CRI_CONFIG_RETRY)
    if resp is None or not resp.HasField("linux"):
        return
    driver = resp.linux.cgroup_driver
    if driver == pb.SYSTEMD:
        s.config.cgroup_driver = "systemd"
    elif driver == pb.CGROUPFS:
        s.config.cgroup_driver = "cgroupfs"
    else:
        raise ContainerManagerError(f"runtime returned an unknown cgroup driver {driver}")
    log.info("Using cgroup driver setting received from the CRI runtime: %s",
             s.config.cgroup_driver)  # fmt: skip


def new_container_manager(
    s: KubeletServer, name: str, deps: Dependencies, inputs: NodeInputs
) -> ContainerManager:
    """NewContainerManager: raises ContainerManagerError (swap, driver, cgroup root)."""
    from kubelet.cm.node_container_manager import parse_resource_list
    from kubelet.nodestatus.setters import capacity

    cap = parse_resource_list(capacity(inputs))
    cap.pop("pods", None)
    try:
        nc = NodeConfig.from_config(s.config, name)
    except ValueError as err:
        raise ContainerManagerError(f"kubeReserved/systemReserved failed to parse: {err}") from err

    def node_event(etype: str, reason: str, message: str) -> None:
        if deps.recorder is not None:
            ref: ObjectReference = {"kind": "Node", "name": name, "uid": name, "namespace": ""}
            deps.recorder.event(ref, etype, reason, message)

    return ContainerManager(nc, cap, host=deps.host_paths, node_event=node_event)


def credential_plugins(s: KubeletServer) -> LoadedPlugins | None:
    """The exec credential provider plugins, when either flag is given; raises
    PluginRegistrationError (fatal, as upstream) for any problem with them."""
    f = s.flags
    if not (f.image_credential_provider_config or f.image_credential_provider_bin_dir):
        return None
    sa_tokens = FeatureGate(s.config.feature_gates).enabled(
        Feature.KubeletServiceAccountTokenForCredentialProviders
    )
    loaded = load_plugins(
        f.image_credential_provider_config, f.image_credential_provider_bin_dir, sa_tokens
    )
    log.info("Registered credential provider plugins: %s", [p.name for p in loaded.providers])
    return loaded


def node_inputs(s: KubeletServer, name: str) -> NodeInputs:
    """What the node status setters read that the flags and the machine say;
    the Kubelet adds what it learns at run time (runtime, images, pressure)."""
    from kubelet.nodestatus.machine import machine_info
    from kubelet.nodestatus.setters import default_node_ip, rootfs_capacity

    ips = [ip.strip() for ip in s.flags.node_ip.split(",") if ip.strip()] or [default_node_ip()]
    root = s.flags.root_directory
    proxy = FeatureGate(s.config.feature_gates).enabled(Feature.DisableNodeKubeProxyVersion)
    return NodeInputs(
        name=name,
        config=s.config,
        machine=machine_info(),
        kubelet_version=KUBERNETES_VERSION,
        kube_proxy_version="" if proxy else KUBERNETES_VERSION,
        node_ips=ips,
        node_labels=dict(s.flags.node_labels),
        hostname=(s.flags.hostname_override or "").strip().lower() or name,
        rootfs_capacity=lambda: rootfs_capacity(root),
    )


async def _new_kubelet(
    s: KubeletServer, deps: Dependencies, name: str
) -> tuple[Kubelet, ContainerManager]:
    """The Kubelet and its started container manager, from the flags and config."""
    from kubelet.cm.cpumanager.topology import discover as discover_cpus
    from kubelet.cm.resource_managers import apply_reserved_cpus
    from kubelet.cm.sysinfo import discover as discover_machine
    from kubelet.nodestatus.setters import allocatable, capacity

    # reservedSystemCPUs becomes the reserved cpu before allocatable is computed.
    machine = discover_machine()
    apply_reserved_cpus(s.config, discover_cpus(machine))
    runtime_service, image_service = build_cri(s, deps)
    node_ip = s.flags.node_ip.split(",")[0].strip() or None
    inputs = node_inputs(s, name)
    alloc = allocatable(inputs, capacity(inputs))
    plugins = credential_plugins(s)
    await cgroup_driver_from_cri(s, runtime_service)
    cm = deps.container_manager or new_container_manager(s, name, deps, inputs)
    await asyncio.get_running_loop().run_in_executor(None, cm.start)
    k = Kubelet(
        s.config,
        name,
        s.flags.root_directory,
        runtime_service,
        image_service,
        recorder=deps.recorder,
        kube_client=deps.kube_client,
        node_setup=NodeSetup(
            ip=node_ip,
            allocatable=alloc,
            inputs=inputs,
            machine_topology=machine,
            container_manager=cm,
        ),
        runtime_setup=RuntimeSetup(
            sandbox_image=s.flags.pod_infra_container_image, credential_plugins=plugins
        ),
    )
    return k, cm


def _start_loops(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    k: Kubelet,
    cm: ContainerManager,
    stop: asyncio.Event,
) -> Callable[[], Awaitable[None]]:
    """Start the kubelet's loops, the container manager's and (cluster mode)
    the node's; returns what stops them and closes the API clients."""
    stop_cm = asyncio.Event()
    cm_task = asyncio.create_task(cm.run(stop_cm), name="container-manager")

    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(k.run(), name="kubelet")]
    if k.node_status.reporter is not None:
        tasks += _start_cluster_loops(s, deps, name, k.node_status.reporter, stop)

    def on_done(t: asyncio.Task[None]) -> None:
        # The loops ending on their own is fatal: stop the process rather than
        # serve a node that no longer syncs.
        if not t.cancelled() and t.exception() is not None:
            log.error("kubelet loops failed", exc_info=t.exception())
            stop.set()

    tasks[0].add_done_callback(on_done)

    async def shutdown() -> None:
        stop_cm.set()
        await cm_task
        await k.stop()
        # A loop that ended with an error was logged by on_done already.
        _done, pending = await asyncio.wait({tasks[0]}, timeout=30)
        for t in pending:
            t.cancel()
        for t in tasks[1:]:
            t.cancel()
        await asyncio.gather(*tasks[1:], return_exceptions=True)
        for c in (deps.kube_client, deps.event_client, deps.heartbeat_client):
            if c is not None:
                await c.close()

    return shutdown


async def start_node(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    stop: asyncio.Event,
    cleanups: list[Cleanup],
) -> Kubelet:
    k, cm = await _new_kubelet(s, deps, name)
    if s.config.run_once:
        return k
    cleanups.append(_start_loops(s, deps, name, k, cm, stop))
    return k


def _start_cluster_loops(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    node_status: NodeStatusManager,
    stop: asyncio.Event,
) -> list[asyncio.Task[Any]]:
    """Node registration and status, the Lease, and the event sender."""
    from kubelet.nodelease import NodeLeaseController

    client = deps.heartbeat_client or deps.kube_client
    assert client is not None  # cluster mode
    lease = NodeLeaseController(
        client,
        name,
        s.config.node_lease_duration_seconds,
        node_uid=node_status.uid,
    )
    tasks = []

    async def register_then_report() -> None:
        await node_status.register()
        if deps.recorder is not None:
            deps.recorder.event(node_status.node_ref(), "Normal", "Starting", "Starting kubelet.")
        await node_status.run(stop)

    if s.config.register_node:
        tasks.append(asyncio.create_task(register_then_report(), name="node-status"))
    tasks.append(asyncio.create_task(lease.run(stop), name="node-lease"))
    if deps.recorder is not None and hasattr(deps.recorder, "run"):
        tasks.append(asyncio.create_task(deps.recorder.run(stop), name="events"))
    return tasks
