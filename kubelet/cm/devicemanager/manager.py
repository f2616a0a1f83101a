"""The device manager (devicemanager/manager.go): what each registered plugin
has reported, as the node's capacity and allocatable, and the devices each
container was given.

A resource's capacity is all its devices, its allocatable the healthy ones.
When a plugin's stream ends its devices turn unhealthy (allocatable 0) while
the capacity stays for STOP_GRACE_PERIOD, so a plugin that restarts keeps its
resource; after that the resource is reported as 0 until a plugin registers it
again (the Node keeps the name, as the Go kubelet leaves it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import grpc
from google.protobuf.message import DecodeError

from kubelet import metrics
from kubelet.checkpointmanager import CheckpointError, CheckpointStore
from kubelet.cm.devicemanager import (
    CHECKPOINT_NAME,
    DEVICE_PLUGINS_DIR,
    HEALTHY,
    STOP_GRACE_PERIOD,
)
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.checkpoint import DeviceCheckpoint, Entry, marshal, unmarshal
from kubelet.cm.devicemanager.endpoint import Endpoint, ResourceDevices
from kubelet.cm.devicemanager.health import DeviceHealth
from kubelet.cm.devicemanager.pod_devices import (
    Allocation,
    AllocationError,
    DeviceRunOptions,
    PodDevices,
    run_options,
)
from kubelet.cm.devicemanager.server import (
    DIAL_TIMEOUT,
    PluginClient,
    PluginConnectError,
    RegistrationServer,
    rpc_error,
)
from kubelet.cm.devicemanager.topology_hints import (
    NO_TOPOLOGY,
    Split,
    choose,
    filter_by_affinity,
    generate_hints,
    has_topology,
)
from kubelet.cm.interfaces import PodLookup
from kubelet.cm.topologymanager.policy import ProviderHints, TopologyHint
from kubelet.cm.topologymanager.topology_manager import (
    Store,
    admission_rejection,
    init_and_app_containers,
)
from kubelet.lifecycle.predicate import Rejection
from kubelet.resourcehelper import pod_limits
from kubelet.types import Container, Pod, ResourceStatus, uid
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.quantity import parse_quantity

log = logging.getLogger(__name__)

OPTIONS_TIMEOUT = 10.0
# Upstream waits on Allocate and PreStartContainer without a deadline; a plugin
# that hangs should fail the container's start (retried) rather than its worker.
ALLOCATE_TIMEOUT = 120.0
NO_AFFINITY = TopologyHint(None, False)


def device_requests(c: Container, is_device_resource: Callable[[str], bool]) -> dict[str, int]:
    """The container's device plugin resources (limits: requests equal them)."""
    limits = (c.get("resources") or {}).get("limits") or {}
    out = {}
    for resource, qty in limits.items():
        if is_device_resource(resource):
            out[resource] = int(parse_quantity(qty))
    return {r: n for r, n in out.items() if n > 0}


class Capacity(NamedTuple):
    """GetCapacity: counts per resource, and resources gone (reported as 0)."""

    capacity: dict[str, int]
    allocatable: dict[str, int]
    removed: list[str]


class DeviceManager:
    """ManagerImpl: the ClientHandler of the registration server."""

    def __init__(
        self,
        root_dir: str,
        pods: PodLookup | None = None,
        sources_ready: Callable[[], bool] = lambda: True,
        clock: Clock = REAL_CLOCK,
        grace_period: float = STOP_GRACE_PERIOD,
        dial_timeout: float = DIAL_TIMEOUT,
        numa_nodes: Sequence[int] = (),
        affinity: Store | None = None,
        health_changed: Callable[[str], None] | None = None,
    ) -> None:
        """health_changed (ResourceHealthStatus on): told the UID of each pod
        holding a device whose health changed, so its status is synced."""
        self.socket_dir = os.path.join(root_dir, DEVICE_PLUGINS_DIR)
        self.clock = clock
        self.grace_period = grace_period
        # Set when capacity or allocatable changed: the node status is due.
        self._changed = asyncio.Event()
        self.endpoints: dict[str, Endpoint] = {}
        self.devices: dict[str, ResourceDevices] = {}
        self._removed: set[str] = set()
        self.pods = pods
        self.sources_ready = sources_ready
        self.pod_devices = PodDevices()
        # The machine's NUMA nodes, and the topology manager's chosen affinities
        # (None: allocation ignores NUMA, as with the topology policy none).
        self.numa_nodes = list(numa_nodes)
        self.affinity = affinity
        self.health = DeviceHealth(self.endpoints, self.devices, self.pod_devices, health_changed)
        self._store = CheckpointStore(self.socket_dir)
        self.server = RegistrationServer(self.socket_dir, self, dial_timeout)

    async def start(self) -> None:
        self._read_checkpoint()
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    # ------------------------------------------------------------ handler

    async def plugin_connected(self, client: PluginClient) -> None:
        try:
            options = await client.api().GetDevicePluginOptions(pb.Empty(), timeout=OPTIONS_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            raise PluginConnectError(
                f"failed to get device plugin options: {rpc_error(err)}"
            ) from None
        with self.health.watch(client.resource):
            self.endpoints[client.resource] = Endpoint(client.resource, client, options)
            # Until its first list the resource has no devices, but it exists.
            self.devices.setdefault(client.resource, ResourceDevices())
        self._removed.discard(client.resource)
        log.info("Device plugin connected: %s", client.resource)
        self._changed.set()

    def plugin_disconnected(self, client: PluginClient) -> None:
        ep = self.endpoints.get(client.resource)
        if ep is None or ep.client is not client:
            return
        with self.health.watch(client.resource):
            self._mark_unhealthy(client.resource)
            ep.stopped_at = self.clock.monotonic()
        log.info("Device plugin %s stopped: its devices are unhealthy; the resource "
                 "leaves the node's capacity in %.0fs unless it registers again",
                 client.resource, self.grace_period)  # fmt: skip
        self._changed.set()

    def devices_listed(self, client: PluginClient, devices: list[pb.Device]) -> None:
        ep = self.endpoints.get(client.resource)
        if ep is None or ep.client is not client:
            return
        rd = ResourceDevices()
        for d in devices:
            (rd.healthy if d.health == HEALTHY else rd.unhealthy).add(d.ID)
            rd.numa[d.ID] = [n.ID for n in d.topology.nodes] if d.HasField("topology") else []
        with self.health.watch(client.resource):
            self.devices[client.resource] = rd
            ep.listed = True
        self._write_checkpoint()
        log.info("Processed device updates for resource %s: %d devices, %d healthy",
                 client.resource, len(devices), len(rd.healthy))  # fmt: skip
        self._changed.set()

    def _mark_unhealthy(self, resource: str) -> None:
        rd = self.devices.setdefault(resource, ResourceDevices())
        rd.unhealthy |= rd.healthy
        rd.healthy = set()

    # ----------------------------------------------------------- capacity

    def capacity(self) -> Capacity:
        """Capacity (all devices) and allocatable (healthy ones) per resource;
        a resource whose plugin stopped more than the grace period ago is
        dropped here and reported as removed from then on."""
        now = self.clock.monotonic()
        gone = False
        cap: dict[str, int] = {}
        alloc: dict[str, int] = {}
        for resource in sorted(self.devices):
            ep = self.endpoints.get(resource)
            if ep is None or (
                ep.stopped_at is not None and now - ep.stopped_at >= self.grace_period
            ):
                log.info("Device plugin resource %s removed from the node's capacity", resource)
                self.devices.pop(resource)
                self.endpoints.pop(resource, None)
                self._removed.add(resource)
                gone = True
                continue
            rd = self.devices[resource]
            cap[resource] = len(rd.healthy) + len(rd.unhealthy)
            alloc[resource] = len(rd.healthy)
        if gone:
            self._write_checkpoint()
        return Capacity(cap, alloc, sorted(self._removed))

    async def capacity_changed(self) -> None:
        """Returns once a plugin changed what capacity() reports."""
        await self._changed.wait()
        self._changed.clear()

    # --------------------------------------------------------- allocation

    def is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self.devices

    def allocated_counts(self, pod_uid: str) -> dict[str, int]:
        """sanitizeNodeAllocatable: for a pod that holds devices, how many devices
        of each resource are allocated in all; admission counts at least these
        as allocatable (a plugin not yet back after a restart lists none)."""
        if pod_uid not in self.pod_devices.pods:
            return {}
        held = {r for c in self.pod_devices.pods.values() for rs in c.values() for r in rs}
        return {r: len(self.pod_devices.in_use(r)) for r in sorted(held)}

    def admit(self, pod: Pod) -> Rejection | None:
        """Devices for every container without the topology manager (as its
        policy none does): UnexpectedAdmissionError when they cannot be had."""
        for c in init_and_app_containers(pod):
            try:
                self.allocate(pod, c)
            except AllocationError as err:
                return admission_rejection(err)
        return None

    # ----------------------------------------------------- hint provider

    def get_topology_hints(self, pod: Pod, c: Container) -> ProviderHints:
        """GetTopologyHints: per device resource of the container, the NUMA
        masks its free (or already held, or reusable) devices could come from."""
        pod_uid = uid(pod)
        self._release_inactive(pod_uid)
        reusable = self.pod_devices.reusable(pod, c)
        return {
            resource: self._hints(
                resource,
                need,
                self.pod_devices.get(pod_uid, c["name"], resource),
                reusable.get(resource, set()),
            )
            for resource, need in sorted(device_requests(c, self._is_allocatable).items())
        }

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints:
        """GetPodTopologyHints: as above for the pod's device limits as a whole."""
        pod_uid = uid(pod)
        self._release_inactive(pod_uid)
        limits = pod_limits(pod, overhead=False)
        out: dict[str, list[TopologyHint] | None] = {}
        for resource in sorted(r for r, n in limits.items() if n > 0 and self._is_allocatable(r)):
            held = self.pod_devices.pod_ids(pod_uid, resource)
            out[resource] = self._hints(resource, int(limits[resource]), held or None, set())
        return out

    def _hints(
        self, resource: str, need: int, held: Allocation | set[str] | None, reusable: set[str]
    ) -> list[TopologyHint] | None:
        rd = self.devices.get(resource)
        if rd is None or not has_topology(rd.numa):
            log.info("Resource %s does not have a topology preference", resource)
            return None
        if held is not None:  # re-admitted (kubelet restart): the same hints again
            ids = set(held.ids if isinstance(held, Allocation) else held)
            if len(ids) != need:
                log.info("Resource %s already allocated with %d devices, not the %d requested",
                         resource, len(ids), need)  # fmt: skip
                return []
            return generate_hints(self.numa_nodes, rd.numa, ids, set(), need)
        available = rd.healthy - self.pod_devices.in_use(resource)
        if len(available | reusable) < need:
            log.info("No topology hints for %s: %d devices requested, %d available",
                     resource, need, len(available | reusable))  # fmt: skip
            return []
        return generate_hints(self.numa_nodes, rd.numa, available, reusable, need)

    def allocate(self, pod: Pod, c: Container) -> None:
        """Allocate (at admission, through the topology manager): pick the
        container's devices against its chosen NUMA affinity. The plugin's
        Allocate (and GetPreferredAllocation) are asked when it is created."""
        pod_uid, name = uid(pod), c["name"]
        self._release_inactive(pod_uid)
        reusable = self.pod_devices.reusable(pod, c)
        picked: list[tuple[str, list[str]]] = []
        for resource, need in sorted(device_requests(c, self._is_allocatable).items()):
            have = self.pod_devices.get(pod_uid, name, resource)
            if have is not None:
                if not self._restarted_running(pod_uid, name):
                    self._check_kept(resource, have, need, name)
                continue
            ids = self._pick(resource, need, reusable.get(resource, set()), pod_uid, name)
            picked.append((resource, ids))
        for resource, ids in picked:
            self.pod_devices.insert(pod_uid, name, resource, self._allocation(resource, ids))

    def _restarted_running(self, pod_uid: str, name: str) -> bool:
        """Re-admitted after a kubelet restart while its container runs: its
        devices are kept even before its plugin lists them again (upstream
        skips the health check until every pod source is ready)."""
        if self.pods is None or self.sources_ready():
            return False
        return any(rc.name == name for rc in self.pods.running_containers(pod_uid))

    def _is_allocatable(self, resource: str) -> bool:
        return resource in self.devices or resource in self.endpoints

    def _check_kept(self, resource: str, have: Allocation, need: int, name: str) -> None:
        if len(have.ids) != need:
            raise AllocationError(
                f'container "{name}" changed request for resource "{resource}" '
                f"from {len(have.ids)} to {need}"
            )
        if not set(have.ids) <= self.devices[resource].healthy:
            raise AllocationError(
                "previously allocated devices are no longer healthy; "
                f"cannot allocate unhealthy devices {resource}"
            )

    def _chosen_affinity(self, pod_uid: str, name: str) -> TopologyHint:
        return self.affinity.get_affinity(pod_uid, name) if self.affinity else NO_AFFINITY

    def _pick(
        self, resource: str, need: int, reusable: set[str], pod_uid: str, name: str
    ) -> list[str]:
        """devicesToAllocate: reusable devices first, then free healthy ones
        from the chosen NUMA nodes, then from other nodes, then those
        without topology."""
        rd = self.devices.get(resource)
        if rd is None:
            raise AllocationError(f"cannot allocate unregistered device {resource}")
        if not rd.healthy:
            raise AllocationError(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}"
            )
        ids = sorted(reusable & rd.healthy)[:need]
        free = rd.healthy - self.pod_devices.in_use(resource) - set(ids)
        if len(free) < need - len(ids):
            raise AllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {need - len(ids)}, Available: {len(free)}"
            )
        split = filter_by_affinity(
            rd.numa, self._chosen_affinity(pod_uid, name).numa_affinity, free
        )
        return choose(need, [ids, *split])

    def _allocation(self, resource: str, ids: list[str]) -> Allocation:
        numa: dict[int, list[str]] = {}
        for d in ids:
            for n in self.devices[resource].numa.get(d) or [NO_TOPOLOGY]:
                numa.setdefault(n, []).append(d)
        return Allocation(ids, numa)

    def _release_inactive(self, keep: str) -> None:
        """UpdateAllocatedDevices: devices of pods no longer active are free."""
        # Before every source delivered, a pod not seen yet may still be active.
        if self.pods is None or not self.sources_ready():
            return
        for pod_uid in list(self.pod_devices.pods):
            if pod_uid != keep and self.pods.active_pod(pod_uid) is None:
                self.remove_pod(pod_uid)

    # --------------------------------------------------------- pod-resources

    def allocated_resources_status(self, pod_uid: str, name: str) -> list[ResourceStatus]:
        return self.health.container_status(pod_uid, name)

    def update_allocated_devices(self) -> None:
        self._release_inactive(keep="")

    def container_devices(self, pod_uid: str, name: str) -> dict[str, dict[str, list[int]]]:
        """The container's devices per resource, each with the NUMA nodes it was
        allocated on (empty: no topology), from the allocation's record."""
        out: dict[str, dict[str, list[int]]] = {}
        for resource, alloc in self.pod_devices.container(pod_uid, name).items():
            devices = out.setdefault(resource, {})
            for node, ids in alloc.numa.items():
                for d in ids:
                    nodes = devices.setdefault(d, [])
                    if node != NO_TOPOLOGY:
                        nodes.append(node)
        return out

    def allocatable_devices(self) -> dict[str, dict[str, list[int]]]:
        """GetAllocatableDevices: the healthy devices of each resource with their NUMA nodes."""
        return {
            resource: {d: list(rd.numa.get(d) or []) for d in rd.healthy}
            for resource, rd in self.devices.items()
        }

    def remove_pod(self, pod_uid: str) -> None:
        if self.pod_devices.delete(pod_uid):
            log.info("Devices of pod %s released", pod_uid)
            self._write_checkpoint()

    async def container_options(self, pod: Pod, c: Container) -> DeviceRunOptions:
        """GetDeviceRunContainerOptions: Allocate asked of each plugin once per
        container (the answer is kept for restarts), PreStartContainer when the
        plugin wants it; AllocationError when a plugin fails or is gone."""
        pod_uid, name = uid(pod), c["name"]
        wanted = device_requests(c, self._is_allocatable)
        if any(self.pod_devices.get(pod_uid, name, r) is None for r in wanted):
            # Admitted before the plugin registered, or before a restart: now.
            for each in init_and_app_containers(pod):
                self.allocate(pod, each)
        allocations = self.pod_devices.container(pod_uid, name)
        for resource, alloc in sorted(allocations.items()):
            ep = self._endpoint(resource)
            if alloc.response is None:
                if ep.options.get_preferred_allocation_available:
                    await self._prefer(ep, resource, pod_uid, name, alloc)
                alloc.response = await self._allocate(ep, resource, alloc.ids)
                self._write_checkpoint()
            if ep.options.pre_start_required:
                await self._pre_start(ep, resource, alloc.ids)
        return run_options(allocations)

    def _endpoint(self, resource: str) -> Endpoint:
        ep = self.endpoints.get(resource)
        if ep is None or ep.client is None:
            raise AllocationError(f"unknown Device Plugin {resource}")
        if ep.stopped_at is not None:
            raise AllocationError(f"endpoint {resource} has been stopped")
        return ep

    async def _allocate(
        self, ep: Endpoint, resource: str, ids: list[str]
    ) -> pb.ContainerAllocateResponse:
        assert ep.client is not None
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
        started = time.monotonic()
        try:
            resp: pb.AllocateResponse = await ep.client.api().Allocate(
                req, timeout=ALLOCATE_TIMEOUT
            )
        except grpc.aio.AioRpcError as err:
            raise AllocationError(
                f"device plugin Allocate of {resource} failed: {rpc_error(err)}"
            ) from None
        finally:
            metrics.DEVICE_PLUGIN_ALLOC_DURATION.labels(resource).observe(
                time.monotonic() - started
            )
        if not resp.container_responses:
            raise AllocationError(f"no containers return in allocation response {resp}")
        return resp.container_responses[0]

    async def _prefer(
        self, ep: Endpoint, resource: str, pod_uid: str, name: str, alloc: Allocation
    ) -> None:
        """GetPreferredAllocation as devicesToAllocate asks it: devices reused
        from an init container stay; when the chosen NUMA nodes have more free
        devices than needed the plugin chooses among those, otherwise all of
        theirs are taken and it chooses the rest among every free device. Its
        choice replaces the admission's pick where still free once it answers
        (admission may have run meanwhile)."""
        assert ep.client is not None
        rd = self.devices.get(resource) or ResourceDevices()
        need = len(alloc.ids)
        reused = sorted(set(alloc.ids) & self.pod_devices.in_use(resource, {(pod_uid, name)}))
        remaining = need - len(reused)

        def free() -> Split:
            own = set(alloc.ids) - set(reused)
            avail = own | (rd.healthy - self.pod_devices.in_use(resource))
            hint = self._chosen_affinity(pod_uid, name)
            return filter_by_affinity(rd.numa, hint.numa_affinity, avail)

        split = free()
        if remaining <= 0 or len(split.aligned) == remaining:
            return  # nothing left for the plugin to choose
        within = len(split.aligned) > remaining
        ask = split.aligned if within else [d for group in split for d in group]
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=sorted({*ask, *reused}),
                must_include_deviceIDs=reused,
                allocation_size=need,
            )
        ])  # fmt: skip
        try:
            resp = await ep.client.api().GetPreferredAllocation(req, timeout=ALLOCATE_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            raise AllocationError(
                f"device plugin GetPreferredAllocation rpc failed with err: {rpc_error(err)}"
            ) from None
        if not resp.container_responses:
            return
        still = free()
        free_now = {d for group in still for d in group}
        preferred = [d for d in resp.container_responses[0].deviceIDs if d in free_now and d in ask]
        groups = (
            [reused, preferred, still.aligned] if within else [reused, still.aligned, preferred]
        )
        chosen = choose(need, [*groups, still.unaligned, still.no_topology])
        chosen += [d for d in alloc.ids if d not in chosen][: need - len(chosen)]
        fresh = self._allocation(resource, chosen)
        self.pod_devices.set_ids(pod_uid, name, resource, alloc, fresh)

    async def _pre_start(self, ep: Endpoint, resource: str, ids: list[str]) -> None:
        assert ep.client is not None
        try:
            await ep.client.api().PreStartContainer(
                pb.PreStartContainerRequest(devices_ids=ids), timeout=ALLOCATE_TIMEOUT
            )
        except grpc.aio.AioRpcError as err:
            raise AllocationError(
                f"device plugin PreStartContainer rpc failed with err: {rpc_error(err)}"
            ) from None

    # --------------------------------------------------------- checkpoint

    def _write_checkpoint(self) -> None:
        """Containers' devices with their Allocate answers (an allocation not
        answered yet is picked again after a restart, as upstream skips it)
        and each resource's healthy devices."""
        entries = [
            Entry(pod_uid, name, resource, dict(a.numa), a.response.SerializeToString())
            for pod_uid, containers in sorted(self.pod_devices.pods.items())
            for name, resources in sorted(containers.items())
            for resource, a in sorted(resources.items())
            if a.response is not None
        ]
        registered: dict[str, list[str] | None] = {
            r: sorted(rd.healthy) for r, rd in sorted(self.devices.items())
        }
        try:
            self._store.write(
                CHECKPOINT_NAME, marshal(DeviceCheckpoint(entries or None, registered))
            )
        except OSError as err:
            log.error("Failed to write checkpoint file %s: %s", CHECKPOINT_NAME, err)

    def _read_checkpoint(self) -> None:
        """The previous run's allocations; its resources stay at 0 until their
        plugins register again, and leave after the grace period otherwise."""
        try:
            blob = self._store.read(CHECKPOINT_NAME)
            if blob is None:
                return
            cp = unmarshal(blob)
        except (CheckpointError, OSError) as err:
            log.error("Continue after failing to read checkpoint file %s: %s; device "
                      "allocation info may NOT be up-to-date", CHECKPOINT_NAME, err)  # fmt: skip
            return
        for e in cp.entries or []:
            try:
                resp = pb.ContainerAllocateResponse.FromString(e.alloc_resp or b"")
            except DecodeError as err:
                log.error("Can't unmarshal allocResp of pod %s container %s: %s",
                          e.pod_uid, e.container, err)  # fmt: skip
                continue
            numa = {n: list(ids or []) for n, ids in (e.device_ids or {}).items()}
            ids = sorted({d for v in numa.values() for d in v})
            self.pod_devices.insert(e.pod_uid, e.container, e.resource, Allocation(ids, numa, resp))
        now = self.clock.monotonic()
        for resource in cp.registered or {}:
            self.devices[resource] = ResourceDevices()
            self.endpoints[resource] = Endpoint(
                resource, None, pb.DevicePluginOptions(), stopped_at=now
            )
