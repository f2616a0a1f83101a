"""What the volume plugin tests share: fake API object getters and token
requests, the pods and volumes they set up, and the checks on what reached
the disk."""

from __future__ import annotations

import asyncio
import base64
import datetime
from pathlib import Path
from typing import Any

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
