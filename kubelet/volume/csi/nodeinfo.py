"""What a registered CSI driver adds to this node in the API (nodeinfomanager
upstream): its entry in the CSINode object (node ID, topology keys, the
allocatable volume count), the Node's `csi.volume.kubernetes.io/nodeid`
annotation, and the topology segments it reports as Node labels.

The CSINode is created at start, owned by the Node; until that has worked the
node reports NotReady ("CSINode is not yet initialized"), as upstream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubelet.client.rest import APIClient, APIError
from kubelet.volume.csi.client import NodeInfo

# One update of the node info for a driver (installed: info; removed: None).
_Update = Callable[[str, NodeInfo | None], Awaitable[None]]

log = logging.getLogger(__name__)

NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"
CSINODE_PATH = "/apis/storage.k8s.io/v1/csinodes"
CONFLICT_RETRIES = 5
MAX_INT32 = 2**31 - 1


class NodeInfoError(Exception):
    pass


class NodeInfoManager:
    def __init__(self, client: APIClient, node_name: str) -> None:
        self.client = client
        self.node_name = node_name
        self._lock = asyncio.Lock()
        self.initialized = asyncio.Event()
        self.init_error: str | None = "CSINode is not yet initialized"

    @property
    def node_path(self) -> str:
        return f"/api/v1/nodes/{self.node_name}"

    @property
    def csinode_path(self) -> str:
        return f"{CSINODE_PATH}/{self.node_name}"

    async def initialize(self, stop: asyncio.Event) -> None:
        """Create the CSINode if missing; retries (30 ms x8, up to 30 s) until it works."""
        delay = 0.03
        while not stop.is_set():
            try:
                async with self._lock:
                    await self._get_or_create()
                self.init_error = None
                self.initialized.set()
                return
            except Exception as err:  # retried until it works: CSI volumes wait for it
                self.init_error = f"failed to initialize CSINode: {err}"
                log.warning("Failed to initialize CSINode: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            delay = min(delay * 8, 30.0)

    async def _get_or_create(self) -> dict[str, Any]:
        try:
            return dict(await self.client.get(self.csinode_path))
        except APIError as err:
            if not err.not_found:
                raise
        node = await self.client.get(self.node_path)
        obj = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": self.node_name,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node_name,
                        "uid": node["metadata"]["uid"],
                    }
                ],
            },
            "spec": {"drivers": []},
        }
        try:
            return dict(await self.client.create(CSINODE_PATH, obj))
        except APIError as err:
            if not err.already_exists:
                raise
            return dict(await self.client.get(self.csinode_path))

    async def install_driver(self, driver: str, info: NodeInfo) -> None:
        if not info.node_id:
            raise NodeInfoError("error adding CSI driver node info: driverNodeID must not be empty")
        await self._retry(self._update_node, driver, info)
        await self._retry(self._install_in_csinode, driver, info)

    async def uninstall_driver(self, driver: str) -> None:
        await self._retry(self._uninstall_from_csinode, driver, None)
        await self._retry(self._update_node, driver, None)

    async def _retry(self, fn: _Update, driver: str, info: NodeInfo | None) -> None:
        for attempt in range(CONFLICT_RETRIES):
            try:
                async with self._lock:
                    await fn(driver, info)
                return
            except APIError as err:
                if not err.conflict or attempt == CONFLICT_RETRIES - 1:
                    raise NodeInfoError(f"updating node info for {driver}: {err}") from err

    async def _update_node(self, driver: str, info: NodeInfo | None) -> None:
        node = await self.client.get(self.node_path)
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        try:
            ids = json.loads(ann[NODE_ID_ANNOTATION]) if ann.get(NODE_ID_ANNOTATION) else {}
        except ValueError as err:
            raise NodeInfoError(
                f"failed to parse node's {NODE_ID_ANNOTATION!r} annotation"
            ) from err
        patch_meta: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion")}
        if info is None:
            if driver not in ids:
                return
            del ids[driver]
            patch_meta["annotations"] = {NODE_ID_ANNOTATION: json.dumps(ids) if ids else None}
        else:
            for k, v in info.topology.items():
                if k in labels and labels[k] != v:
                    raise NodeInfoError(
                        f"detected topology value collision: driver reported {k!r}:{v!r} "
                        f"but existing label is {k!r}:{labels[k]!r}"
                    )
            new_labels = {k: v for k, v in info.topology.items() if labels.get(k) != v}
            if ids.get(driver) == info.node_id and not new_labels:
                return
            ids[driver] = info.node_id
            patch_meta["annotations"] = {NODE_ID_ANNOTATION: json.dumps(ids, sort_keys=True)}
            if new_labels:
                patch_meta["labels"] = new_labels
        await self.client.patch(self.node_path, {"metadata": patch_meta})

    async def _install_in_csinode(self, driver: str, info: NodeInfo | None) -> None:
        assert info is not None
        obj = await self._get_or_create()
        spec = obj.setdefault("spec", {})
        drivers = [d for d in spec.get("drivers") or [] if d.get("name") != driver]
        entry: dict[str, Any] = {
            "name": driver,
            "nodeID": info.node_id,
            "topologyKeys": sorted(info.topology),
        }
        if info.max_volumes_per_node > 0:
            entry["allocatable"] = {"count": min(info.max_volumes_per_node, MAX_INT32)}
        old = next((d for d in spec.get("drivers") or [] if d.get("name") == driver), None)
        if old is not None and _same_entry(old, entry):
            return
        spec["drivers"] = [*drivers, entry]
        await self.client.update(self.csinode_path, obj)

    async def _uninstall_from_csinode(self, driver: str, info: NodeInfo | None) -> None:
        try:
            obj = await self.client.get(self.csinode_path)
        except APIError as err:
            if err.not_found:
                return
            raise
        spec = obj.setdefault("spec", {})
        drivers = spec.get("drivers") or []
        kept = [d for d in drivers if d.get("name") != driver]
        if len(kept) == len(drivers):
            return
        spec["drivers"] = kept
        await self.client.update(self.csinode_path, obj)


def _same_entry(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return (
        old.get("nodeID") == new["nodeID"]
        and sorted(old.get("topologyKeys") or []) == new["topologyKeys"]
        and (old.get("allocatable") or {}).get("count")
        == (new.get("allocatable") or {}).get("count")
    )
