"""The watch-based configMap/secret manager against a fake API client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubelet.objectcache import (
    CONFIGMAP,
    SECRET,
    ObjectNotFoundError,
    StandaloneError,
    WatchingObjectManager,
    configmap_names,
    secret_names,
)
from kubelet.util.clock import FakeClock


class FakeAPI:
    """configmaps/secrets by (resource, namespace, name); list and watch honour
    the metadata.name field selector; watches stream what put()/delete() do."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 1
        self.lists: list[tuple[str, str]] = []
        self.watches: list[tuple[str, str]] = []
        self.open_watches: dict[int, tuple[str, str, str, asyncio.Queue[Any]]] = {}
        self.fail_lists = False

    @staticmethod
    def _parse(path: str, params: dict[str, str]) -> tuple[str, str, str]:
        # /api/v1/namespaces/<ns>/<resource>
        parts = path.strip("/").split("/")
        assert parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5, path
        sel = params["fieldSelector"]
        assert sel.startswith("metadata.name="), sel
        return parts[4], parts[3], sel.split("=", 1)[1]

    def put(self, resource: str, ns: str, name: str, **fields: Any) -> dict[str, Any]:
        self.rv += 1
        key = (resource, ns, name)
        etype = "MODIFIED" if key in self.objects else "ADDED"
        obj = {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(self.rv)}}
        obj.update(fields)
        self.objects[key] = obj
        self._notify(key, etype, obj)
        return obj

    def delete(self, resource: str, ns: str, name: str) -> None:
        self.rv += 1
        obj = self.objects.pop((resource, ns, name))
        self._notify((resource, ns, name), "DELETED", obj)

    def _notify(self, key: tuple[str, str, str], etype: str, obj: dict[str, Any]) -> None:
        for r, ns, name, q in self.open_watches.values():
            if (r, ns, name) == key:
                q.put_nowait((etype, obj))

    async def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        resource, ns, name = self._parse(path, params)
        self.lists.append((ns, name))
        if self.fail_lists:
            raise ConnectionError("API server unreachable")
        obj = self.objects.get((resource, ns, name))
        return {"metadata": {"resourceVersion": str(self.rv)}, "items": [obj] if obj else []}

    async def watch(
        self, path: str, params: dict[str, str]
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        resource, ns, name = self._parse(path, params)
        self.watches.append((ns, name))
        q: asyncio.Queue[Any] = asyncio.Queue()
        token = id(q)
        self.open_watches[token] = (resource, ns, name, q)
        try:
            while True:
                yield await q.get()
        finally:
            del self.open_watches[token]

    def watching(self, ns: str, name: str) -> int:
        return sum(1 for _, n, m, _ in self.open_watches.values() if (n, m) == (ns, name))


def pod(name: str, uid: str, *cms: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "configMap": {"name": cm}} for i, cm in enumerate(cms)]
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"volumes": volumes, "containers": [{"name": "c"}], **spec},
    }


async def settle(cond: Any, timeout: float = 2.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def manager(api: FakeAPI, kind: str = CONFIGMAP, **kw: Any) -> WatchingObjectManager:
    return WatchingObjectManager(kind, api, **kw)  # type: ignore[arg-type]


async def test_one_watch_shared_by_many_pods_stopped_after_last() -> None:
    api = FakeAPI()
    api.put("configmaps", "default", "shared", data={"k": "v"})
    m = manager(api)
    pods = [pod(f"p{i}", f"u{i}", "shared") for i in range(5000)]
    for p in pods:
        m.register_pod(p)
    assert m.watches == 1
    assert (await m.get("default", "shared"))["data"] == {"k": "v"}
    await settle(lambda: api.watching("default", "shared") == 1)
    assert len(api.lists) == 1 and len(api.watches) == 1
    for p in pods[:-1]:
        m.unregister_pod(p)
    assert m.watches == 1
    assert api.watching("default", "shared") == 1
    m.unregister_pod(pods[-1])
    assert m.watches == 0
    await settle(lambda: api.watching("default", "shared") == 0)
    with pytest.raises(LookupError, match=r'object "default"/"shared" not registered'):
        await m.get("default", "shared")
    await m.close()


async def test_update_propagates_through_the_watch() -> None:
    api = FakeAPI()
    api.put("configmaps", "default", "cm", data={"k": "1"})
    m = manager(api)
    m.register_pod(pod("p", "u", "cm"))
    assert (await m.get("default", "cm"))["data"] == {"k": "1"}
    await settle(lambda: api.watching("default", "cm") == 1)
    api.put("configmaps", "default", "cm", data={"k": "2"})
    await settle(lambda: m._items[("default", "cm")].obj["data"] == {"k": "2"})  # type: ignore[index]
    assert (await m.get("default", "cm"))["data"] == {"k": "2"}
    assert len(api.lists) == 1  # reads come from the cache
    api.delete("configmaps", "default", "cm")
    await settle(lambda: m._items[("default", "cm")].obj is None)
    with pytest.raises(ObjectNotFoundError, match=r'configmap "cm" not found'):
        await m.get("default", "cm")
    api.put("configmaps", "default", "cm", data={"k": "3"})
    await settle(lambda: m._items[("default", "cm")].obj is not None)
    assert (await m.get("default", "cm"))["data"] == {"k": "3"}
    await m.close()


async def test_not_found_and_per_namespace() -> None:
    api = FakeAPI()
    api.put("secrets", "other", "s", data={})
    m = manager(api, SECRET)
    m.register_pod(
        {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"volumes": [{"name": "v", "secret": {"secretName": "s"}}]},
        }
    )
    with pytest.raises(ObjectNotFoundError, match=r'secret "s" not found'):
        await m.get("default", "s")
    assert api.lists == [("default", "s")]
    await m.close()


async def test_immutable_object_is_no_longer_watched() -> None:
    api = FakeAPI()
    api.put("configmaps", "default", "frozen", data={"k": "v"}, immutable=True)
    m = manager(api)
    m.register_pod(pod("p", "u", "frozen"))
    assert (await m.get("default", "frozen"))["data"] == {"k": "v"}
    assert m.watches == 0
    await settle(lambda: api.watching("default", "frozen") == 0)
    # Still served from the cache, without a new list.
    assert (await m.get("default", "frozen"))["data"] == {"k": "v"}
    m.register_pod(pod("p2", "u2", "frozen"))
    assert (await m.get("default", "frozen"))["data"] == {"k": "v"}
    assert len(api.lists) == 1 and m.watches == 0
    await m.close()


async def test_sync_timeout_has_upstreams_message() -> None:
    api = FakeAPI()
    api.fail_lists = True
    m = manager(api, sync_timeout=0.05)
    m.register_pod(pod("p", "u", "cm"))
    with pytest.raises(TimeoutError, match=r"failed to sync configmap cache: timed out waiting"):
        await m.get("default", "cm")
    await m.close()


async def test_standalone_mode() -> None:
    m = WatchingObjectManager(CONFIGMAP, None)
    m.register_pod(pod("p", "u", "cm"))
    with pytest.raises(StandaloneError, match=r"couldn't get configmap default/cm, no kubeClient"):
        await m.get("default", "cm")


async def test_pod_update_moves_references() -> None:
    api = FakeAPI()
    m = manager(api)
    m.register_pod(pod("p", "u", "a", "b"))
    assert sorted(m._items) == [("default", "a"), ("default", "b")]
    m.register_pod(pod("p", "u", "b", "c"))  # same pod, new spec
    assert sorted(m._items) == [("default", "b"), ("default", "c")]
    assert m._items[("default", "b")].refs == 1
    m.register_pod(pod("p", "u", "b", "c"))  # registering twice counts once
    assert m._items[("default", "b")].refs == 1
    m.unregister_pod(pod("p", "u"))
    assert m._items == {}
    await m.close()


async def test_idle_watch_paused_and_resumed_on_read() -> None:
    api = FakeAPI()
    api.put("configmaps", "default", "env-only", data={"k": "1"})
    clock = FakeClock()
    m = manager(api, clock=clock, resync_interval=60)
    m.register_pod(pod("p", "u", "env-only"))
    await m.get("default", "env-only")
    clock.step(200)
    assert m.recycle_idle() == 0  # 5 x 60 s not reached
    clock.step(101)
    assert m.recycle_idle() == 1
    assert m.watches == 0
    await settle(lambda: api.watching("default", "env-only") == 0)
    api.put("configmaps", "default", "env-only", data={"k": "2"})
    # The next read resumes the watch, which lists again before answering.
    assert (await m.get("default", "env-only"))["data"] == {"k": "2"}
    assert m.watches == 1 and len(api.lists) == 2
    await m.close()


async def test_register_outside_the_loop_starts_on_first_get() -> None:
    api = FakeAPI()
    api.put("configmaps", "default", "cm", data={"k": "v"})
    m = manager(api)
    # Registration from a thread without a running loop.
    await asyncio.get_running_loop().run_in_executor(None, m.register_pod, pod("p", "u", "cm"))
    assert m.watches == 0
    assert (await m.get("default", "cm"))["data"] == {"k": "v"}
    assert m.watches == 1
    await m.close()


def test_referenced_names() -> None:
    p = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [
                {"name": "i", "envFrom": [{"configMapRef": {"name": "cm-init"}}]},
            ],
            "containers": [
                {
                    "name": "c",
                    "env": [
                        {
                            "name": "A",
                            "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}},
                        },
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
                        {"name": "C", "value": "plain"},
                    ],
                    "envFrom": [{"secretRef": {"name": "s-from"}}],
                }
            ],
            "ephemeralContainers": [
                {"name": "e", "envFrom": [{"configMapRef": {"name": "cm-eph"}}]},
            ],
            "volumes": [
                {"name": "v1", "configMap": {"name": "cm-vol"}},
                {"name": "v2", "secret": {"secretName": "s-vol"}},
                {
                    "name": "v3",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "cm-proj"}},
                            {"secret": {"name": "s-proj"}},
                            {"serviceAccountToken": {"path": "token"}},
                        ]
                    },
                },
                {"name": "v4", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s-csi"}}},
                {"name": "v5", "emptyDir": {}},
            ],
        },
    }
    assert configmap_names(p) == {"cm-init", "cm-env", "cm-eph", "cm-vol", "cm-proj"}
    assert secret_names(p) == {"pull", "s-env", "s-from", "s-vol", "s-proj", "s-csi"}
