"""The kubelet's own Node as admission reads it (getNodeAnyWay in
pkg/kubelet/kubelet_getters.go).

In cluster mode: a list+watch of this one Node (the node informer upstream),
so labels and taints an admin sets count at the next admission. Until the Node
exists (first registration), and always in standalone mode: the node this
kubelet would register (initialNode): the well-known labels, --node-labels,
registerWithTaints, and the allocatable it computes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient
from kubelet.core_v1 import Node, ResourceList
from kubelet.types import as_node
from kubelet.util.quantity import to_bytes

PATH = "/api/v1/nodes"


class NodeLister:
    def __init__(self, client: APIClient | None, name: str, initial: Callable[[], Node]) -> None:
        """initial: the node as it would be registered, built when asked."""
        self.name = name
        self.initial = initial
        self._node: Node | None = None
        # Set after the first list (HasSynced): the API pod source waits on it,
        # as upstream's does, so a pod is never admitted against a node not yet read.
        self.synced = asyncio.Event()
        self.reflector: Reflector | None = None
        if client is None:
            self.synced.set()
        else:
            self.reflector = Reflector(
                client, PATH, {"fieldSelector": f"metadata.name={name}"},
                self._on_list, self._on_event,
            )  # fmt: skip

    def get(self) -> Node:
        """The API server's copy when there is one, else the initial node."""
        return self._node if self._node is not None else self.initial()

    def watched(self) -> Node | None:
        """The API server's copy, None before the Node exists or standalone."""
        return self._node

    async def _on_list(self, items: list[dict[str, Any]]) -> None:
        self._node = next((as_node(n) for n in items if self._ours(n)), None)
        self.synced.set()

    async def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        if not self._ours(obj):
            return
        self._node = None if etype == "DELETED" else as_node(obj)

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        return bool(obj.get("metadata", {}).get("name") == self.name)

    async def run(self, stop: asyncio.Event) -> None:
        if self.reflector is not None:
            await self.reflector.run(stop)


def with_allocatable(node: Node, floor: Mapping[str, int]) -> Node:
    """The node with each resource of `floor` raised to at least that count in
    its allocatable (sanitizeNodeAllocatable: devices already allocated count as
    allocatable). The node given is not changed."""
    if not floor:
        return node
    status = node.get("status") or {}
    alloc: ResourceList = dict(status.get("allocatable") or {})
    for k, n in floor.items():
        if k not in alloc or to_bytes(alloc[k]) < n:
            alloc[k] = str(n)
    out = node.copy()
    out["status"] = {**status, "allocatable": alloc}
    return out
