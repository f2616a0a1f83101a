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
from dataclasses import dataclass, field
from typing import NamedTuple

import grpc

from kubelet.cm.devicemanager import DEVICE_PLUGINS_DIR, HEALTHY, STOP_GRACE_PERIOD
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.server import (
    DIAL_TIMEOUT,
    PluginClient,
    PluginConnectError,
    RegistrationServer,
    rpc_error,
)
from kubelet.util.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

OPTIONS_TIMEOUT = 10.0


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
        self.server = RegistrationServer(self.socket_dir, self, dial_timeout)

    async def start(self) -> None:
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
                continue
            rd = self.devices[resource]
            cap[resource] = len(rd.healthy) + len(rd.unhealthy)
            alloc[resource] = len(rd.healthy)
        return Capacity(cap, alloc, sorted(self._removed))

    def is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self.devices

    async def capacity_changed(self) -> None:
        """Returns once a plugin changed what capacity() reports."""
        await self._changed.wait()
        self._changed.clear()
