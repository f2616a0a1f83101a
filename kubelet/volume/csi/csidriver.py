"""CSIDriver objects (storage.k8s.io/v1), watched: what each driver asks of
the kubelet (attachRequired, podInfoOnMount, fsGroupPolicy, lifecycle modes,
service-account tokens). A driver without a CSIDriver object gets upstream's
defaults: attach required, no pod info, fsGroup by fsType, persistent only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient
from kubelet.volume import VolumeError

PATH = "/apis/storage.k8s.io/v1/csidrivers"
SYNC_TIMEOUT = 30.0

READ_WRITE_ONCE_WITH_FSTYPE = "ReadWriteOnceWithFSType"
FILE = "File"
NONE = "None"
PERSISTENT = "Persistent"
EPHEMERAL = "Ephemeral"

CSIDriverSpec = dict[str, Any]


class CSIDrivers:
    def __init__(
        self, client: APIClient | None, fixed: dict[str, CSIDriverSpec] | None = None
    ) -> None:
        # Without a client (tests, standalone) the objects are the fixed ones.
        self._by_name: dict[str, CSIDriverSpec] = dict(fixed or {})
        self.reflector = (
            Reflector(client, PATH, {}, self._on_list, self._on_event) if client else None
        )

    async def run(self, stop: asyncio.Event) -> None:
        if self.reflector is not None:
            await self.reflector.run(stop)

    async def _on_list(self, items: list[dict[str, Any]]) -> None:
        self._by_name = {
            str(o["metadata"]["name"]): o.get("spec") or {} for o in items if o.get("metadata")
        }

    async def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if etype == "DELETED":
            self._by_name.pop(name, None)
        elif name:
            self._by_name[name] = obj.get("spec") or {}

    async def get(self, driver: str) -> CSIDriverSpec | None:
        """The driver's CSIDriver spec, None when there is none. Waits for the
        first list, as upstream waits for its informer's cache."""
        if self.reflector is None:
            return self._by_name.get(driver)
        if not self.reflector.synced.is_set():
            try:
                await asyncio.wait_for(self.reflector.synced.wait(), SYNC_TIMEOUT)
            except TimeoutError as err:
                raise VolumeError(
                    "CSIDriver objects could not be listed from the API server"
                ) from err
        return self._by_name.get(driver)


def attach_required(spec: CSIDriverSpec | None) -> bool:
    return spec is None or spec.get("attachRequired") is not False


def pod_info_on_mount(spec: CSIDriverSpec | None) -> bool:
    return bool(spec and spec.get("podInfoOnMount"))


def fs_group_policy(spec: CSIDriverSpec | None) -> str:
    if spec is None:
        return READ_WRITE_ONCE_WITH_FSTYPE
    policy = spec.get("fsGroupPolicy")
    if not policy:
        raise VolumeError("expected valid fsGroupPolicy, received nil value or empty string")
    return str(policy)


def lifecycle_modes(spec: CSIDriverSpec | None) -> list[str]:
    if spec is None:
        return [PERSISTENT]
    return [str(m) for m in spec.get("volumeLifecycleModes") or [PERSISTENT]]


def token_requests(spec: CSIDriverSpec | None) -> list[dict[str, Any]]:
    return list((spec or {}).get("tokenRequests") or [])


def requires_republish(spec: CSIDriverSpec | None) -> bool:
    return bool(spec and spec.get("requiresRepublish"))
