"""Registered CSI drivers, and the plugin manager's handler for CSIPlugin
(RegistrationHandler and csi_drivers_store.go upstream).

A driver is usable once registered: its highest supported CSI version (1.x),
the socket the registrar named, and a client on it. Registration asks the
driver NodeGetInfo and writes the node info (nodeinfo.py); a failure there
undoes the registration. A second registration of the same name is accepted
only with a higher version, as upstream.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from kubelet.pluginmanager import PluginError
from kubelet.volume import VolumeError
from kubelet.volume.csi import validate_driver_name
from kubelet.volume.csi.client import CSI_TIMEOUT, CSIClient
from kubelet.volume.csi.nodeinfo import NodeInfoManager

log = logging.getLogger(__name__)

Version = tuple[int, ...]
_GENERIC_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)+)")


def parse_version(text: str) -> Version | None:
    """ParseGeneric: at least two dot-separated numbers, an optional leading v."""
    m = _GENERIC_VERSION.match(text)
    if not m or (len(m.group(1)) > 1 and m.group(1)[0] == "0" and m.group(1)[1] != "."):
        return None
    return tuple(int(p) for p in m.group(1).split("."))


def highest_supported(versions: list[str]) -> Version:
    """HighestSupportedVersion: the highest 1.x of the list; PluginError if none."""
    if not versions:
        raise PluginError("plugin returned an empty list for supported versions")
    parsed = [v for v in (parse_version(x) for x in versions) if v is not None and v[0] <= 1]
    best = max(parsed, default=None)
    if best is None or best[0] != 1:
        raise PluginError(f"none of the versions specified {versions} are supported (need v1.x)")
    return best


@dataclass
class Driver:
    name: str
    endpoint: str
    version: Version
    client: CSIClient


class DriversStore:
    def __init__(self) -> None:
        self._drivers: dict[str, Driver] = {}
        # Woken on every (de)registration: operations waiting for a driver retry.
        self.changed = asyncio.Event()

    def get(self, name: str) -> Driver | None:
        return self._drivers.get(name)

    def client(self, name: str) -> CSIClient:
        """The driver's client; VolumeError naming the driver when it is not registered."""
        d = self._drivers.get(name)
        if d is None:
            raise VolumeError(
                f"kubernetes.io/csi: driver name {name} not found in the list of registered CSI drivers"
            )
        return d.client

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def set(self, driver: Driver) -> Driver | None:
        old = self._drivers.get(driver.name)
        self._drivers[driver.name] = driver
        self.changed.set()
        self.changed = asyncio.Event()
        return old

    def delete(self, name: str) -> Driver | None:
        d = self._drivers.pop(name, None)
        self.changed.set()
        self.changed = asyncio.Event()
        return d


class RegistrationHandler:
    """The pluginmanager PluginHandler for CSIPlugin."""

    def __init__(
        self,
        store: DriversStore,
        nodeinfo: NodeInfoManager | None,
        client_factory: Callable[[str, str], CSIClient] = CSIClient,
        timeout: float = CSI_TIMEOUT,
    ) -> None:
        self.store = store
        self.nodeinfo = nodeinfo
        self.client_factory = client_factory
        self.timeout = timeout

    def _validate(self, name: str, versions: list[str]) -> Version:
        why = validate_driver_name(name)
        if why:
            raise PluginError(why)
        version = highest_supported(versions)
        existing = self.store.get(name)
        if existing is not None and not existing.version < version:
            raise PluginError(
                f"another driver with the same name {name!r} is already registered with a "
                f"higher supported version: {'.'.join(map(str, existing.version))}"
            )
        return version

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        log.info("Validating CSI driver %s at %s (versions %s)", name, endpoint, versions)
        try:
            self._validate(name, versions)
        except PluginError as err:
            raise PluginError(
                f"validation failed for CSI Driver {name} at endpoint {endpoint}: {err}"
            ) from err

    async def register_plugin(
        self, name: str, endpoint: str, versions: list[str], timeout: float | None
    ) -> None:
        version = self._validate(name, versions)
        driver = Driver(name, endpoint, version, self.client_factory(name, endpoint))
        old = self.store.set(driver)
        if old is not None:
            await old.client.close()
        try:
            info = await driver.client.node_get_info(timeout or self.timeout)
            if self.nodeinfo is not None:
                await self.nodeinfo.install_driver(name, info)
        except Exception:  # not hidden: re-raised once the half registration is undone
            await self._unregister(name, driver)
            raise
        log.info("CSI driver %s registered: node ID %s, max volumes %d, topology %s",
                 name, info.node_id, info.max_volumes_per_node, info.topology)  # fmt: skip

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        log.info("Deregistering CSI driver %s (endpoint %s)", name, endpoint)
        d = self.store.get(name)
        if d is None or d.endpoint != endpoint:
            # A newer instance took the name over: its registration stays.
            log.info("CSI driver %s at %s is not the registered instance; kept", name, endpoint)
            return
        await self._unregister(name, d)

    async def _unregister(self, name: str, driver: Driver) -> None:
        if self.store.get(name) is driver:
            self.store.delete(name)
        await driver.client.close()
        if self.nodeinfo is not None:
            try:
                await self.nodeinfo.uninstall_driver(name)
            except Exception as err:  # the driver is gone whatever the API server said
                log.error("Removing CSI driver %s from the node info failed: %s", name, err)
