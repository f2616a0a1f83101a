"""ResourceHealthStatus (KEP-4680) for device plugin resources: the health of
the devices a container holds, as its status reports it
(containerStatuses[].allocatedResourcesStatus).

A device is Healthy or Unhealthy as its plugin last listed it. It is Unknown
when nothing current says: its plugin stopped, has not listed since it
registered (or since the kubelet restarted), or no longer lists it. The API
defines Unknown for these cases; the Go kubelet v1.34 instead keeps reporting
the last health it was told (Healthy for a device no longer listed).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from kubelet import types as v1
from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
from kubelet.cm.devicemanager.endpoint import Endpoint, ResourceDevices
from kubelet.cm.devicemanager.pod_devices import PodDevices

log = logging.getLogger(__name__)

UNKNOWN = "Unknown"

# (resource, device ID) -> Healthy, Unhealthy or Unknown
HealthOf = Callable[[str, str], str]


def device_health(
    current: bool, healthy: Collection[str], unhealthy: Collection[str], device_id: str
) -> str:
    """current: the resource's plugin is serving and has listed its devices."""
    if not current:
        return UNKNOWN
    if device_id in healthy:
        return HEALTHY
    if device_id in unhealthy:
        return UNHEALTHY
    return UNKNOWN


def resources_status(
    devices: Mapping[str, Sequence[str]], health: HealthOf
) -> list[v1.ResourceStatus]:
    """One entry per resource, its devices by ID; sorted, so an unchanged
    health gives an unchanged status (and no patch)."""
    return [
        {
            "name": resource,
            "resources": [{"resourceID": d, "health": health(resource, d)} for d in sorted(ids)],
        }
        for resource, ids in sorted(devices.items())
        if ids
    ]


class DeviceHealth:
    """The manager's health view: it reads the manager's endpoints, devices
    and allocations (the same objects, never copies)."""

    def __init__(
        self,
        endpoints: Mapping[str, Endpoint],
        devices: Mapping[str, ResourceDevices],
        pod_devices: PodDevices,
        changed: Callable[[str], None] | None,
    ) -> None:
        self.endpoints = endpoints
        self.devices = devices
        self.pod_devices = pod_devices
        self.changed = changed

    def of(self, resource: str, device_id: str) -> str:
        ep, rd = self.endpoints.get(resource), self.devices.get(resource)
        if ep is None or rd is None:
            return UNKNOWN
        current = ep.listed and ep.stopped_at is None
        return device_health(current, rd.healthy, rd.unhealthy, device_id)

    @contextlib.contextmanager
    def watch(self, resource: str) -> Iterator[None]:
        """Around a change of what the manager knows of a resource's plugin:
        each pod holding a device whose health it changed is told once
        (found through the allocations' index, never a walk over all pods)."""
        if self.changed is None:
            yield
            return
        held = self.pod_devices.held(resource)
        before = {d: self.of(resource, d) for d in held}
        yield
        pods = {
            p
            for d in held
            if self.of(resource, d) != before[d]
            for p in self.pod_devices.holders(resource, d)
        }
        for pod_uid in sorted(pods):
            log.info("Health of %s devices held by pod %s changed: syncing its status",
                     resource, pod_uid)  # fmt: skip
            self.changed(pod_uid)

    def container_status(self, pod_uid: str, name: str) -> list[v1.ResourceStatus]:
        """UpdateAllocatedResourcesStatus for one container: each resource it
        holds devices of, with their health (empty: it holds none)."""
        held = {r: a.ids for r, a in self.pod_devices.container(pod_uid, name).items()}
        return resources_status(held, self.of)
