"""What the DRA tests share: an API server answering ResourceClaim GETs and
ResourceSlice deletes, pods with claims, and a manager wired to real drivers
(FakeDRAPlugin over Unix sockets) registered through its handler."""

from __future__ import annotations

import os
from typing import Any, cast

from kubelet.client.rest import APIClient, APIError
from kubelet.cm.dra.claiminfo import ClaimInfoCache
from kubelet.cm.dra.health import DRAHealth
from kubelet.cm.dra.manager import DRAManager
from kubelet.cm.dra.plugin import DRAPluginManager
from kubelet.testing.draplugin import FakeDRAPlugin
from tests.unit.cm.fixtures import Pods

NS = "default"


class FakeAPI:
    def __init__(self) -> None:
        self.claims: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []
        self.deletes: list[str] = []

    async def get(self, path: str, **kw: Any) -> Any:
        self.gets.append(path)
        name = path.rsplit("/", 1)[1]
        if name not in self.claims:
            raise APIError(404, "NotFound", f'resourceclaims "{name}" not found')
        return self.claims[name]

    async def delete(self, path: str, options: Any = None, **kw: Any) -> Any:
        self.deletes.append(path)
        return {}

    def client(self) -> APIClient:
        return cast(APIClient, self)


def claim(
    name: str, results: list[tuple[str, str]], reserved: list[str], owner: str = ""
) -> dict[str, Any]:
    """results: (driver, request) per allocated device."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "Pod"}]
    return {
        "metadata": meta,
        "status": {
            "allocation": {"devices": {"results": [
                {"driver": d, "request": r, "pool": "pool", "device": f"{name}-{i}"}
                for i, (d, r) in enumerate(results)
            ]}},
            "reservedFor": [{"resource": "pods", "name": u, "uid": u} for u in reserved],
        },
    }  # fmt: skip


def pod(
    uid: str, claims: dict[str, str], containers: dict[str, list[tuple[str, str]]]
) -> dict[str, Any]:
    """claims: pod claim name -> ResourceClaim name; containers: name -> (claim, request)."""
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": k, "resourceClaimName": v} for k, v in claims.items()],
            "containers": [
                {"name": c, "image": "busybox:1.36", "resources": {"claims": [
                    {"name": n, **({"request": r} if r else {})} for n, r in refs
                ]}}
                for c, refs in containers.items()
            ],
        },
    }  # fmt: skip


def new_manager(
    root: str,
    api: FakeAPI,
    pods: Pods | None = None,
    claims: ClaimInfoCache | None = None,
    health: DRAHealth | None = None,
) -> DRAManager:
    """A DRA manager on the claim info cache in root (or claims), its plugin
    manager handing health streams to health when given."""
    plugins = DRAPluginManager(
        api.client(), "n1", wipe_delay=0.05, wipe_backoff=(0.01, 0.02, 3),
        health_retry=(0.02, 0.05), health=health,
    )  # fmt: skip
    claims = claims or ClaimInfoCache(root)
    return DRAManager(claims, api.client(), plugins, pods or Pods(), lambda: True)


async def add_driver(
    m: DRAManager,
    root: str,
    driver: str,
    devices: dict[str, list[tuple[list[str], list[str]]]],
    **kw: Any,
) -> FakeDRAPlugin:
    """A driver serving at <root>/<driver>.sock, registered with the manager's handler."""
    endpoint = os.path.join(root, driver + ".sock")
    plugin = await FakeDRAPlugin(driver, devices, **kw).start(os.path.join(root, "reg"), endpoint)
    h = m.plugins
    h.validate_plugin(driver, endpoint, list(plugin.services))
    await h.register_plugin(driver, endpoint, list(plugin.services), None)
    return plugin
