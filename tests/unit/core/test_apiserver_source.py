"""APIServerSource: list + watch of this node's pods into PodConfig, on a fake API client."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubelet.client.rest import APIError
from kubelet.config.apiserver import APIServerSource
from kubelet.config.config import Op, PodConfig, PodUpdate
from kubelet.testing.wait import wait_for_async

SOURCE_ANN = "kubernetes.io/config.source"
SEEN_ANN = "kubernetes.io/config.seen"
END = object()  # ends the current watch stream cleanly (a server-side timeout)


class FakeAPI:
    """The server side: `pods` is what a list returns; each watch streams what the
    test feeds with send()/fail()/end(), in order (the reflector test's idea, live)."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods or []}
        self.rv = 10
        self.lists: list[tuple[str, dict[str, str]]] = []
        self.watches: list[tuple[str, dict[str, str]]] = []
        self._stream: asyncio.Queue[Any] = asyncio.Queue()

    async def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        self.lists.append((path, params))
        items = [copy.deepcopy(p) for p in self.pods.values()]
        return {"kind": "PodList", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    async def watch(
        self, path: str, params: dict[str, str]
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watches.append((path, params))
        while True:
            item = await self._stream.get()
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def send(self, etype: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self._stream.put_nowait((etype, obj))

    def bookmark(self, rv: int) -> None:
        self._stream.put_nowait(("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": str(rv)}}))  # fmt: skip

    def error_event(self, code: int, reason: str) -> None:
        status = {"kind": "Status", "code": code, "reason": reason, "message": "too old"}
        self._stream.put_nowait(("ERROR", status))

    def fail(self, err: BaseException) -> None:
        self._stream.put_nowait(err)

    def end(self) -> None:
        self._stream.put_nowait(END)


class CountingConfig(PodConfig):
    """PodConfig that counts full snapshots (set_pods) against single-pod changes."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots = 0

    def set_pods(self, source: str, pods: list[dict[str, Any]]) -> None:
        self.snapshots += 1
        super().set_pods(source, pods)


def pod(uid: str, image: str = "busybox:1.36", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"pod-{uid}",
            "namespace": "default",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            **meta,
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": image}]},
        "status": {"phase": "Pending"},
    }


async def next_update(cfg: PodConfig, timeout: float = 2.0) -> PodUpdate:
    return await asyncio.wait_for(cfg.updates.get(), timeout)


def summary(u: PodUpdate) -> tuple[Op, list[str], str]:
    return u.op, [p["metadata"]["uid"] for p in u.pods], u.source


class Running:
    def __init__(self, api: FakeAPI, cfg: CountingConfig, src: APIServerSource) -> None:
        self.api, self.cfg, self.src = api, cfg, src


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    """A source on a server with pods a and b, listed and watching."""
    api = FakeAPI([pod("a"), pod("b")])
    cfg = CountingConfig()
    src = APIServerSource(api, "n1", cfg)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    await wait_for_async("a watch opened", lambda: api.watches, 2.0, 0.005, retry_on=())
    yield Running(api, cfg, src)
    stop.set()
    await asyncio.wait_for(task, 2)  # stop ends a watch that is waiting for events


# ------------------------------------------------------------------- list


async def test_the_list_becomes_the_api_snapshot(running: Running) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    u = await next_update(cfg)
    assert u.op is Op.ADD and u.source == "api"
    assert sorted(p["metadata"]["uid"] for p in u.pods) == ["a", "b"]
    assert cfg.updates.empty() and "api" in cfg.sources_seen
    # Only this node's pods, and the watch starts where the list left off.
    assert api.lists == [("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"})]
    path, params = api.watches[0]
    assert path == "/api/v1/pods" and params["fieldSelector"] == "spec.nodeName=n1"
    assert params["resourceVersion"] == "10" and params["allowWatchBookmarks"] == "true"
    assert src.reflector.synced.is_set()


async def test_listed_pods_carry_the_source_annotations_and_get_returns_them(
    running: Running,
) -> None:
    cfg, src = running.cfg, running.src
    await next_update(cfg)
    a = src.get("a")
    assert a is not None and a["metadata"]["uid"] == "a"
    ann = a["metadata"]["annotations"]
    assert ann[SOURCE_ANN] == "api"
    assert ann[SEEN_ANN] == "2026-01-02T03:04:05Z"  # the creation time when none was set
    assert src.get("nope") is None
    # PodConfig holds the very copy the source answers with.
    assert any(p is a for p in cfg.all_pods())


async def test_an_empty_list_still_marks_the_source_seen() -> None:
    api = FakeAPI()
    cfg = CountingConfig()
    src = APIServerSource(api, "n1", cfg)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    try:
        u = await next_update(cfg)
        assert summary(u) == (Op.ADD, [], "api") and "api" in cfg.sources_seen
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)


async def test_own_annotations_are_kept(running: Running) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    api.send("ADDED", pod("c", annotations={"team": "x", SEEN_ANN: "earlier"}))
    await next_update(cfg)
    ann = src.get("c")["metadata"]["annotations"]  # type: ignore[index]
    assert ann == {"team": "x", SEEN_ANN: "earlier", SOURCE_ANN: "api"}
    api.send("ADDED", {**pod("d"), "metadata": {**pod("d")["metadata"], "annotations": None}})
    await next_update(cfg)
    assert src.get("d")["metadata"]["annotations"][SOURCE_ANN] == "api"  # type: ignore[index]


# ------------------------------------------------------------------ watch


async def test_each_watch_event_changes_one_pod_without_a_full_replace(
    running: Running,
) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    assert cfg.snapshots == 1

    api.send("ADDED", pod("c"))
    assert summary(await next_update(cfg)) == (Op.ADD, ["c"], "api")
    assert src.get("c")["metadata"]["annotations"][SOURCE_ANN] == "api"  # type: ignore[index]

    api.send("MODIFIED", pod("a", "busybox:2"))  # a spec change
    u = await next_update(cfg)
    assert summary(u) == (Op.UPDATE, ["a"], "api")
    assert u.pods[0]["spec"]["containers"][0]["image"] == "busybox:2"
    assert src.get("a")["spec"]["containers"][0]["image"] == "busybox:2"  # type: ignore[index]

    running_b = {**pod("b"), "status": {"phase": "Running"}}
    api.send("MODIFIED", running_b)  # only the status moved
    assert summary(await next_update(cfg)) == (Op.RECONCILE, ["b"], "api")

    deleting = pod("c")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-02T04:00:00Z"
    api.send("MODIFIED", deleting)
    assert summary(await next_update(cfg)) == (Op.DELETE, ["c"], "api")

    api.send("DELETED", deleting)
    assert summary(await next_update(cfg)) == (Op.REMOVE, ["c"], "api")
    assert src.get("c") is None

    assert cfg.snapshots == 1  # never a full replace for a watch event
    assert sorted(p["metadata"]["uid"] for p in cfg.all_pods()) == ["a", "b"]
    assert cfg.updates.empty()


async def test_a_change_of_resource_version_alone_is_not_an_update(running: Running) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    api.send("MODIFIED", pod("a", managedFields=[{"manager": "kubectl"}]))
    api.send("ADDED", pod("marker"))  # to know the MODIFIED was handled
    assert summary(await next_update(cfg)) == (Op.ADD, ["marker"], "api")
    assert src.get("a")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]


async def test_events_without_a_uid_or_for_unknown_pods_change_nothing(
    running: Running,
) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    api.send("ADDED", {"metadata": {"name": "no-uid"}, "spec": {}})
    api.send("DELETED", pod("never-seen"))
    api.send("ADDED", pod("marker"))
    assert summary(await next_update(cfg)) == (Op.ADD, ["marker"], "api")
    assert sorted(src.pods) == ["a", "b", "marker"]


async def test_410_gone_relists_and_the_new_list_replaces_the_snapshot(
    running: Running,
) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    # While the watch was too old, a went away, c came and b changed.
    del api.pods["a"]
    api.pods["c"] = pod("c")
    api.pods["b"] = pod("b", "busybox:2")
    api.rv = 50
    api.error_event(410, "Expired")
    got = [summary(await next_update(cfg)) for _ in range(3)]
    assert got == [(Op.REMOVE, ["a"], "api"), (Op.ADD, ["c"], "api"), (Op.UPDATE, ["b"], "api")]
    assert len(api.lists) == 2 and cfg.snapshots == 2
    assert sorted(src.pods) == ["b", "c"] and src.get("a") is None
    await wait_for_async("a second watch", lambda: len(api.watches) == 2, 2.0, 0.005, retry_on=())
    assert api.watches[1][1]["resourceVersion"] == "50"  # from the new list


async def test_a_410_raised_by_the_client_relists_too(running: Running) -> None:
    api, cfg = running.api, running.cfg
    await next_update(cfg)
    api.pods["c"] = pod("c")
    api.fail(APIError(410, "Gone", "resourceVersion too old"))
    assert summary(await next_update(cfg)) == (Op.ADD, ["c"], "api")
    assert len(api.lists) == 2


async def test_bookmarks_move_the_resource_version_without_events(running: Running) -> None:
    api, cfg, src = running.api, running.cfg, running.src
    await next_update(cfg)
    api.send("ADDED", pod("c"))  # rv 11
    await next_update(cfg)
    api.bookmark(40)
    api.end()  # the server closes the watch: resume from the bookmark, no re-list
    await wait_for_async("a second watch", lambda: len(api.watches) == 2, 2.0, 0.005, retry_on=())
    assert api.watches[1][1]["resourceVersion"] == "40"
    assert src.reflector.resource_version == "40"
    assert len(api.lists) == 1 and cfg.updates.empty()
    assert sorted(src.pods) == ["a", "b", "c"]


async def test_a_watch_resumes_from_the_last_event_seen(running: Running) -> None:
    api, cfg = running.api, running.cfg
    await next_update(cfg)
    api.send("ADDED", pod("c"))
    api.send("MODIFIED", pod("c", "x:2"))  # rv 12
    api.end()
    await wait_for_async("a second watch", lambda: len(api.watches) == 2, 2.0, 0.005, retry_on=())
    assert api.watches[1][1]["resourceVersion"] == "12" and len(api.lists) == 1
