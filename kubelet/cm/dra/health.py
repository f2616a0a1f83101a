"""ResourceHealthStatus (KEP-4680) for DRA devices (HandleWatchResourcesStream
and UpdateAllocatedResourcesStatus of cm/dra/manager.go upstream).

A driver streams its devices' health (NodeWatchResources, one stream per
registered endpoint, opened by the plugin manager); every response updates
the health cache, and each pod whose claims hold a device whose health
changed is asked to sync its status, found through the claim info cache's
device index. When a stream ends the driver's health is forgotten (its devices are
Unknown again) and the pods that saw it change are synced too.

A container's allocatedResourcesStatus gets one entry per claim it names,
"claim:<name>" or "claim:<name>/<request>", listing every device of the claim
by its first CDI device ID (else "<driver>/<pool>/<device>") with its health.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable, Collection, Iterable
from typing import Protocol

from kubelet import types as v1
from kubelet.cm.dra import healthinfo as hi
from kubelet.cm.dra.api import health_pb2 as hpb
from kubelet.cm.dra.claiminfo import ContainerClaim
from kubelet.types import Container, Pod

log = logging.getLogger(__name__)

_HEALTH = {hpb.HEALTHY: hi.HEALTHY, hpb.UNHEALTHY: hi.UNHEALTHY}


class ClaimDevices(Protocol):
    """What the claim info cache knows of the prepared claims."""

    def pods_using(self, driver: str, pool: str, device: str) -> Collection[str]: ...

    def container_claim_devices(self, pod: Pod, c: Container) -> list[ContainerClaim]: ...


def reported(resp: hpb.NodeWatchResourcesResponse) -> list[hi.DeviceHealth]:
    """A response's devices (health values it does not know are Unknown)."""
    return [
        hi.DeviceHealth(
            d.device.pool_name,
            d.device.device_name,
            _HEALTH.get(d.health, hi.UNKNOWN),
            float(d.last_updated_time),
        )
        for d in resp.devices
    ]


def entry_name(c: ContainerClaim) -> str:
    return f"claim:{c.reference}/{c.request}" if c.request else f"claim:{c.reference}"


class DRAHealth:
    """The plugin manager's stream handler and the status generator's source
    of DRA device health."""

    def __init__(
        self, cache: hi.HealthCache, claims: ClaimDevices, changed: Callable[[str], None]
    ) -> None:
        self.cache = cache
        self.claims = claims
        self.changed = changed
        self.stopping = False

    def stop(self) -> None:
        """The kubelet is stopping: the streams end, but what they said stays in
        the checkpoint (a restart within the timeout reads it back), and no pod
        is synced for it."""
        self.stopping = True

    async def handle_stream(
        self, driver: str, responses: AsyncIterable[hpb.NodeWatchResourcesResponse]
    ) -> None:
        """Until the stream ends (its error, if any, is raised on to the caller);
        the driver's health is cleared however it ends, unless the kubelet stops."""
        try:
            async for resp in responses:
                changed = self.cache.update(driver, reported(resp))
                if changed:
                    self._notify(driver, changed)
        finally:
            self.clear(driver)

    def clear(self, driver: str) -> None:
        if self.stopping:
            return
        log.debug("Clearing the DRA health of driver %s", driver)
        known = [d for d in self.cache.devices(driver)
                 if self.cache.health(driver, d.pool_name, d.device_name) != hi.UNKNOWN]  # fmt: skip
        self.cache.clear_driver(driver)
        self._notify(driver, known)

    def _notify(self, driver: str, devices: Iterable[hi.DeviceHealth]) -> None:
        pods: set[str] = set()
        for d in devices:
            pods.update(self.claims.pods_using(driver, d.pool_name, d.device_name))
        for pod_uid in sorted(pods):
            log.info("Health of DRA driver %s devices held by pod %s changed: syncing its "
                     "status", driver, pod_uid)  # fmt: skip
            self.changed(pod_uid)

    def container_status(self, pod: Pod, c: Container) -> list[v1.ResourceStatus]:
        """UpdateAllocatedResourcesStatus's DRA part for one container: an entry
        per claim it names holding at least one device."""
        out: list[v1.ResourceStatus] = []
        for claim in self.claims.container_claim_devices(pod, c):
            resources: list[v1.ResourceHealth] = [
                {
                    "resourceID": d.cdi_ids[0] if d.cdi_ids else f"{d.driver}/{d.pool}/{d.device}",
                    "health": self.cache.health(d.driver, d.pool, d.device),
                }
                for d in claim.devices
            ]
            if resources:
                out.append({"name": entry_name(claim), "resources": resources})
        return out


def merge_statuses(
    base: list[v1.ResourceStatus], dra: list[v1.ResourceStatus]
) -> list[v1.ResourceStatus]:
    """The device manager's entries, then the claims' (a claim's entry replaces
    one of the same name, as upstream updates entries by name)."""
    by_name = {e["name"]: e for e in base}
    for e in dra:
        by_name[e["name"]] = e
    return [e for e in by_name.values() if e.get("resources")]
