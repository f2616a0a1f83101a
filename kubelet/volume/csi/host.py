"""The CSI parts of a kubelet, built together: the registered drivers and
their plugin-manager handler, the node info they write, the watched
CSIDriver objects, the staging of persistent volumes and the volume plugin.
kubelet.py composes this with the plugin manager and the volume manager.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

from kubelet.client.rest import APIClient
from kubelet.events import Recorder
from kubelet.token.manager import TokenManager
from kubelet.util import mountutil
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.volume import VolumeHost
from kubelet.volume.csi import paths
from kubelet.volume.csi.csidriver import CSIDrivers
from kubelet.volume.csi.drivers import DriversStore, RegistrationHandler
from kubelet.volume.csi.expand import Expander
from kubelet.volume.csi.nodeinfo import NodeInfoManager
from kubelet.volume.csi.plugin import CSIPlugin
from kubelet.volume.csi.staging import StagingManager

REPORT_BATCH = 0.2


class CSIHost:
    def __init__(
        self,
        host: VolumeHost,
        client: APIClient | None,
        tokens: TokenManager | None,
        recorder: Recorder | None = None,
        clock: Clock = REAL_CLOCK,
        mountinfo: str = mountutil.MOUNTINFO,
        csidrivers: CSIDrivers | None = None,
        volume_health: bool = False,
    ) -> None:
        self.drivers = DriversStore()
        self.nodeinfo = NodeInfoManager(client, host.node_name) if client is not None else None
        self.handler = RegistrationHandler(self.drivers, self.nodeinfo)
        self.csidrivers = csidrivers or CSIDrivers(client)
        self._report_needed = asyncio.Event()
        self.staging = StagingManager(
            host.root_dir, self._report_needed.set, clock=clock, mountinfo=mountinfo
        )
        self.expander = (
            Expander(client, self.drivers, host.root_dir, recorder) if client is not None else None
        )
        self.plugin = CSIPlugin(
            host,
            self.drivers,
            self.csidrivers,
            self.staging,
            client,
            tokens,
            mountinfo=mountinfo,
            expander=self.expander,
            volume_health=volume_health,
        )
        self.root_dir = host.root_dir

    def readiness(self) -> str | None:
        """Why the node is not ready yet: the CSINode object is not there."""
        return self.nodeinfo.init_error if self.nodeinfo is not None else None

    def volumes_in_use(self) -> list[str]:
        return self.staging.in_use()

    def volumes_reported(self, names: list[str]) -> None:
        self.staging.mark_reported(names)

    async def report_needed(self) -> None:
        """Returns once a staging waits for its volume to be reported in use
        (the node status is written then, not at its next period); requests
        within REPORT_BATCH seconds share one write."""
        await self._report_needed.wait()
        await asyncio.sleep(REPORT_BATCH)
        self._report_needed.clear()

    async def start(self) -> None:
        """Make the dirs and read the disk; before the volume manager's reconstruct."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _make_dirs, self.root_dir)
        await self.plugin.reconstruct()

    def loops(self, stop: asyncio.Event) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        out: list[tuple[str, Coroutine[Any, Any, None]]] = [
            ("csi-drivers", self.csidrivers.run(stop)),
            ("csi-unstage", self.plugin.run(stop)),
        ]
        if self.nodeinfo is not None:
            out.append(("csinode-init", self.nodeinfo.initialize(stop)))
        return out


def _make_dirs(root_dir: str) -> None:
    os.makedirs(paths.plugin_dir(root_dir), mode=0o750, exist_ok=True)
