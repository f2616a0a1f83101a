"""Plugin registration (pkg/kubelet/pluginmanager upstream), shared by CSI
drivers, device plugins and DRA drivers.

A plugin announces itself by placing a Unix socket in the kubelet's
`<root>/plugins_registry` dir (or a subdir of it) that serves the
pluginregistration Registration service. The watcher notices the socket, the
reconciler asks it GetInfo, hands the answer to the handler registered for its
type, and tells the plugin the verdict with NotifyRegistrationStatus; when the
socket goes away the handler deregisters it. Each handler sees, per plugin
name, validate → register → deregister strictly in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# PluginInfo.type values (pluginregistration/v1 constants).
CSI_PLUGIN = "CSIPlugin"
DEVICE_PLUGIN = "DevicePlugin"
DRA_PLUGIN = "DRAPlugin"

REGISTRY_DIR_NAME = "plugins_registry"


class PluginError(Exception):
    """A handler refuses a plugin; the message goes back to the plugin."""


class PluginHandler(Protocol):
    """What a plugin type's consumer implements (cache.PluginHandler upstream)."""

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        """Raise PluginError when the plugin cannot be accepted (no supported
        version, an older instance of a newer one already registered...)."""
        ...

    async def register_plugin(
        self, name: str, endpoint: str, versions: list[str], timeout: float | None
    ) -> None:
        """Start using the plugin at `endpoint`. Raise PluginError (or any
        error) to refuse it; the plugin is told, and registration is retried
        with back-off while its socket stays."""
        ...

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        """The plugin's registration socket is gone: stop using it."""
        ...


@dataclass(frozen=True)
class RegisteredPlugin:
    """A plugin in the actual state (cache.PluginInfo upstream)."""

    socket_path: str
    # Which incarnation of the socket: a socket deleted and created again gets
    # a new one, and the old registration is undone before the new one.
    generation: int
    plugin_type: str
    name: str
    endpoint: str
