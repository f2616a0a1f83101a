"""RuntimeClass name -> CRI runtime handler (runtimeclass_manager.go upstream).

One list+watch of node.k8s.io/v1 RuntimeClasses (cluster-scoped, few, and
readable by every node), so a lookup at sandbox creation is a dict read. A
pod naming a class that does not exist fails its sandbox creation with the
API's not-found words and is retried on its next sync, as upstream.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient

PATH = "/apis/node.k8s.io/v1/runtimeclasses"
# How long a lookup waits for the first list (the kubelet just started).
SYNC_TIMEOUT = 5.0


class RuntimeClassNotFoundError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f'runtimeclass.node.k8s.io "{name}" not found')
        self.name = name


class RuntimeClassLookup(Protocol):
    async def lookup_runtime_handler(self, name: str) -> str:
        """The handler of RuntimeClass `name` ("" for no name). Raises
        LookupError (RuntimeClassNotFoundError when it does not exist)."""
        ...


class RuntimeClassManager:
    def __init__(self, client: APIClient, sync_timeout: float = SYNC_TIMEOUT) -> None:
        self._handlers: dict[str, str] = {}
        self.sync_timeout = sync_timeout
        self.reflector = Reflector(client, PATH, {}, self._on_list, self._on_event)

    async def _on_list(self, items: list[dict[str, Any]]) -> None:
        self._handlers = {
            str((rc.get("metadata") or {}).get("name") or ""): str(rc.get("handler") or "")
            for rc in items
        }

    async def _on_event(self, etype: str, rc: dict[str, Any]) -> None:
        name = str((rc.get("metadata") or {}).get("name") or "")
        if etype == "DELETED":
            self._handlers.pop(name, None)
        elif etype in ("ADDED", "MODIFIED"):
            self._handlers[name] = str(rc.get("handler") or "")

    async def run(self, stop: asyncio.Event) -> None:
        await self.reflector.run(stop)

    async def lookup_runtime_handler(self, name: str) -> str:
        if not name:
            return ""
        if not self.reflector.synced.is_set():
            try:
                await asyncio.wait_for(self.reflector.synced.wait(), self.sync_timeout)
            except TimeoutError:
                raise LookupError(
                    f"failed to lookup RuntimeClass {name}: the RuntimeClass list has not "
                    "been read yet"
                ) from None
        handler = self._handlers.get(name)
        if handler is None:
            raise RuntimeClassNotFoundError(name)
        return handler

    def cached_handler(self, name: str) -> str | None:
        """The handler of RuntimeClass `name` as last listed, without waiting
        (None: not known)."""
        return self._handlers.get(name) if name else ""
