"""What the volume plugin tests share: fake API object getters and token
requests, the pods and volumes they set up, and the checks on what reached
the disk."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
from pathlib import Path
from typing import Any

from kubelet.client.rest import APIError
from kubelet.objectcache import ObjectNotFoundError
from kubelet.token import TokenManager
from kubelet.util.clock import FakeClock
from kubelet.volume.projected import ProjectedPlugin


class FakeGetter:
    def __init__(self, kind: str = "configmap") -> None:
        self.kind = kind
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets = 0
        self.error: Exception | None = None

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        if self.error is not None:
            raise self.error
        try:
            return self.objects[(namespace, name)]
        except KeyError:
            raise ObjectNotFoundError(self.kind, namespace, name) from None


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}


def read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeTokenAPI:
    def __init__(self, clock: FakeClock, grant: int | None = None) -> None:
        self.clock = clock
        self.grant = grant  # the server's choice of lifetime; None: as asked
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.fail: Exception | None = None
        self.delay = 0.0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((path, body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        exp = self.grant or body["spec"].get("expirationSeconds", 3600)
        return {
            "kind": "TokenRequest",
            "spec": {**body["spec"], "expirationSeconds": exp},
            "status": {
                "token": f"token-{len(self.requests)}",
                "expirationTimestamp": stamp(self.clock.time() + exp),
            },
        }


def kube_api_access(**token: Any) -> dict[str, Any]:
    """What the API server's ServiceAccount admission adds to every pod."""
    return {
        "name": "kube-api-access-x1",
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token", **token}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock(start=1_800_000_000.0)
        self.api = FakeTokenAPI(self.clock)
        self.tokens = TokenManager(self.api, clock=self.clock, jitter=lambda: 0.0)  # type: ignore[arg-type]
        self.configmaps = FakeGetter("configmap")
        self.secrets = FakeGetter("secret")
        self.configmaps.objects[("ns", "kube-root-ca.crt")] = {"data": {"ca.crt": "CA PEM"}}
        self.configmaps.objects[("ns", "app")] = {"data": {"k": "v", "other": "o"}}
        self.secrets.objects[("ns", "s")] = {"data": {"pw": base64.b64encode(b"hunter2").decode()}}
        self.plugin = ProjectedPlugin(
            self.configmaps, self.secrets, self.tokens, lambda: {"cpu": "2", "memory": "1Gi"}
        )


def assert_intact(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["a", "sub"]
    assert (victim / "a").read_text() == "precious a"
    assert (victim / "sub" / "b").read_text() == "precious b"
    assert not (victim / "sub").is_symlink()


class ObjectsAPI:
    """A dict of objects by path with the API's conflict check on patches."""

    def __init__(self, objects: dict[str, Any] | None = None) -> None:
        self.objects = objects or {}
        self.patches: list[tuple[str, Any]] = []
        self.rv = 1

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    async def get(self, path: str, **kw: Any) -> Any:
        if path not in self.objects:
            raise APIError(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def create(self, path: str, obj: Any, **kw: Any) -> Any:
        full = f"{path}/{obj['metadata']['name']}"
        if full in self.objects:
            raise APIError(409, "AlreadyExists", "exists")
        self.objects[full] = copy.deepcopy(obj)
        self.objects[full]["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
        return self._bump(self.objects[full])

    async def update(self, path: str, obj: Any, **kw: Any) -> Any:
        have = self.objects[path]["metadata"].get("resourceVersion")
        if obj["metadata"].get("resourceVersion") != have:
            raise APIError(409, "Conflict", "the object has been modified")
        self.objects[path] = copy.deepcopy(obj)
        return self._bump(self.objects[path])

    async def patch(self, path: str, body: Any, **kw: Any) -> Any:
        self.patches.append((path, body))
        target_path = path.removesuffix("/status")
        obj = self.objects[target_path]
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want and want != obj["metadata"].get("resourceVersion"):
            raise APIError(409, "Conflict", "the object has been modified")
        _merge(obj, body)
        return self._bump(obj)


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            obj.pop(k, None)
        elif isinstance(v, dict) and isinstance(obj.get(k), dict):
            _merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)
