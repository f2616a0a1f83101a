"""What the device manager knows of each resource's plugin (endpoint.go) and
of the devices it listed; shared by the manager and its health reporting."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.server import PluginClient


@dataclass
class Endpoint:
    """A plugin as the manager uses it (endpointImpl): its client and options;
    stopped_at is set once its stream ended (or it is known only from the
    checkpoint of a previous run); listed once its stream sent a list."""

    resource: str
    client: PluginClient | None
    options: pb.DevicePluginOptions
    stopped_at: float | None = None
    listed: bool = False


@dataclass
class ResourceDevices:
    """The devices of one resource, as its plugin last listed them."""

    healthy: set[str] = field(default_factory=set)
    unhealthy: set[str] = field(default_factory=set)
    # Device ID -> NUMA nodes (its topology), for allocation and the checkpoint.
    numa: dict[str, list[int]] = field(default_factory=dict)
