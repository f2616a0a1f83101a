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
from collections.abc import Callable
from dataclasses import dataclass, field
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
from kubelet.cm.interfaces import PodLookup
from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Container, Pod, uid
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.quantity import parse_quantity

log = logging.getLogger(__name__)

OPTIONS_TIMEOUT = 10.0
# Upstream waits on Allocate and PreStartContainer without a deadline; a plugin
# that hangs should fail the container's start (retried) rather than its worker.
ALLOCATE_TIMEOUT = 120.0
NO_TOPOLOGY = -1  # nodeWithoutTopology


def device_requests(c: Container, is_device_resource: Callable[[str], bool]) -> dict[str, int]:
    """The container's device plugin resources (limits: requests equal them)."""
    limits = (c.get("resources") or {}).get("limits") or {}
    out = {}
    for resource, qty in limits.items():
        if is_device_resource(resource):
            out[resource] = int(parse_quantity(qty))
    return {r: n for r, n in out.items() if n > 0}


def _is_restartable(c: Container) -> bool:
    return c.get("restartPolicy") == "Always"


@dataclass
class Endpoint:
    """A plugin as the manager uses it (endpointImpl): its client and options;
    stopped_at is set once its stream ended (or it is known only from the
    checkpoint of a previous run)."""

    resource: str
    client: PluginClient | None
    options: pb.DevicePluginOptions
    stopped_at: float | None = None


@dataclass
class ResourceDevices:
    """The devices of one resource, as its plugin last listed them."""

    healthy: set[str] = field(default_factory=set)
    unhealthy: set[str] = field(default_factory=set)
    # Device ID -> NUMA nodes (its topology), for allocation and the checkpoint.
    numa: dict[str, list[int]] = field(default_factory=dict)


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
    ) -> None:
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
        self.devices[client.resource] = rd
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
        """Pick devices for every container's device plugin resources, or refuse
        the pod as upstream's admission does (UnexpectedAdmissionError)."""
        pod_uid = uid(pod)
        self._release_inactive(pod_uid)
        try:
            picked = self._pick_pod(pod)
        except AllocationError as err:
            return Rejection(
                "UnexpectedAdmissionError", f"Allocate failed due to {err}, which is unexpected"
            )
        for name, resource, alloc in picked:
            self.pod_devices.insert(pod_uid, name, resource, alloc)
        return None

    def _pick_pod(self, pod: Pod) -> list[tuple[str, str, Allocation]]:
        """Devices for each container: a non-restartable init container's
        devices are free again for the containers after it (devicesToReuse)."""
        spec = pod["spec"]
        picked: list[tuple[str, str, Allocation]] = []
        taken: dict[str, set[str]] = {}  # resource -> picked in this pass
        reusable: dict[str, set[str]] = {}
        init = [(c, not _is_restartable(c)) for c in spec.get("initContainers") or []]
        for c, reuses in [*init, *((c, False) for c in spec.get("containers") or [])]:
            for resource, need in sorted(device_requests(c, self._is_allocatable).items()):
                have = self.pod_devices.get(uid(pod), c["name"], resource)
                if have is not None:
                    if not self._restarted_running(uid(pod), c["name"]):
                        self._check_kept(resource, have, need, c["name"])
                    continue
                pool = reusable.setdefault(resource, set())
                ids = self._pick(resource, need, pool, taken.setdefault(resource, set()))
                taken[resource].update(ids)
                pool.difference_update(ids)
                if reuses:
                    pool.update(ids)
                picked.append((c["name"], resource, self._allocation(resource, ids)))
        return picked

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

    def _pick(self, resource: str, need: int, reusable: set[str], taken: set[str]) -> list[str]:
        """devicesToAllocate: reusable devices first, then free healthy ones in
        ID order."""
        rd = self.devices.get(resource)
        if rd is None:
            raise AllocationError(f"cannot allocate unregistered device {resource}")
        if not rd.healthy:
            raise AllocationError(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}"
            )
        ids = sorted(reusable & rd.healthy)[:need]
        free = rd.healthy - self.pod_devices.in_use(resource) - taken - set(ids)
        if len(free) < need - len(ids):
            raise AllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {need - len(ids)}, Available: {len(free)}"
            )
        return ids + sorted(free)[: need - len(ids)]

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
            for cname, resource, alloc in self._pick_pod(pod):
                self.pod_devices.insert(pod_uid, cname, resource, alloc)
        allocations = self.pod_devices.container(pod_uid, name)
        for resource, alloc in sorted(allocations.items()):
            ep = self._endpoint(resource)
            if alloc.response is None:
                if ep.options.get_preferred_allocation_available:
                    await self._prefer(ep, resource, alloc)
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

    async def _prefer(self, ep: Endpoint, resource: str, alloc: Allocation) -> None:
        """GetPreferredAllocation among the picked and the free healthy devices:
        the devices picked at admission are swapped for the plugin's choice
        where it is still free once it answers (admission may have run meanwhile)."""
        assert ep.client is not None

        def candidates() -> set[str]:
            rd = self.devices.get(resource) or ResourceDevices()
            return set(alloc.ids) | (rd.healthy - self.pod_devices.in_use(resource))

        need = len(alloc.ids)
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=sorted(candidates()), allocation_size=need
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
        still = candidates()
        preferred = dict.fromkeys(resp.container_responses[0].deviceIDs)
        chosen = [d for d in preferred if d in still][:need]
        chosen += [d for d in alloc.ids if d not in chosen][: need - len(chosen)]
        fresh = self._allocation(resource, chosen)
        alloc.ids, alloc.numa = fresh.ids, fresh.numa

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
