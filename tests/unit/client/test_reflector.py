"""Reflector recovery rules with a scripted client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIError


class ScriptedClient:
    """list answers from `lists`; each watch plays the next script (events, then an outcome)."""

    def __init__(self, watches: list[tuple[list[tuple[str, dict[str, Any]]], Exception | None]]):
        self.watches = watches
        self.list_rv = 0
        self.watch_rvs: list[str] = []

    async def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        self.list_rv += 100
        return {"metadata": {"resourceVersion": str(self.list_rv)}, "items": []}

    async def watch(
        self, path: str, params: dict[str, str]
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watch_rvs.append(params["resourceVersion"])
        if not self.watches:
            await asyncio.sleep(3600)
        events, outcome = self.watches.pop(0)
        for e in events:
            yield e
        if outcome is not None:
            raise outcome


def obj(rv: int) -> dict[str, Any]:
    return {"metadata": {"name": "p", "resourceVersion": str(rv)}}


async def test_resumes_from_last_version_and_relists_on_gone() -> None:
    client = ScriptedClient(
        [
            ([("ADDED", obj(101)), ("BOOKMARK", obj(105))], ConnectionResetError()),
            ([("MODIFIED", obj(106))], APIError(410, "Expired", "too old resource version")),
            ([], None),
        ]
    )
    lists: list[int] = []
    seen: list[str] = []

    async def on_list(items: list[dict[str, Any]]) -> None:
        lists.append(len(items))

    async def on_event(t: str, o: dict[str, Any]) -> None:
        seen.append(t)

    r = Reflector(client, "/api/v1/pods", {}, on_list, on_event)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    for _ in range(100):
        if len(client.watch_rvs) >= 4:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 5)
    # watch 1 from the list's version; the broken stream resumes from the bookmark;
    # 410 re-lists and watches from the new list's version
    assert client.watch_rvs[:3] == ["100", "105", "200"]
    assert len(lists) == 2
    assert seen == ["ADDED", "MODIFIED"]


async def test_a_watch_cut_after_events_resumes_at_once() -> None:
    # A connection cut every few seconds (a proxy, a load balancer): each watch
    # delivered an event and broke; it must resume at once, not after 0.8, 1.6,
    # 3.2 ... 30 s of back-off.
    client = ScriptedClient(
        [([("MODIFIED", obj(101 + i))], ConnectionResetError()) for i in range(6)]
    )
    seen: list[str] = []

    async def on_list(items: list[dict[str, Any]]) -> None:
        pass

    async def on_event(t: str, o: dict[str, Any]) -> None:
        seen.append(o["metadata"]["resourceVersion"])

    r = Reflector(client, "/api/v1/pods", {}, on_list, on_event)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    for _ in range(20):
        if len(client.watch_rvs) >= 7:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert client.watch_rvs[:7] == ["100", "101", "102", "103", "104", "105", "106"]
    assert seen == [str(101 + i) for i in range(6)]
    assert client.list_rv == 100  # never re-listed


async def test_a_watch_failing_at_once_backs_off() -> None:
    client = ScriptedClient([([], ConnectionRefusedError()) for _ in range(5)])

    async def nothing(*_: Any) -> None:
        pass

    r = Reflector(client, "/api/v1/pods", {}, nothing, nothing)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert len(client.watch_rvs) == 2  # at 0 s and after 0.8 s


def test_objects_are_compacted_as_they_arrive() -> None:
    """managedFields dropped; the short values thousands of pods repeat are one
    object each, longer ones left alone; everything else as the API sent it."""
    import orjson

    from kubelet.client.reflector import compact

    long_value = "x" * 65
    doc = {
        "metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}},
        "spec": {"containers": [{"image": "busybox:1.36", "args": ["sleep", long_value]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    raw = orjson.dumps(doc)
    a, b = compact(orjson.loads(raw)), compact(orjson.loads(raw))
    assert "managedFields" not in a["metadata"]
    expected = dict(doc, metadata={"name": "p", "labels": {"a": "b"}})
    assert a == b == expected
    ca, cb = a["spec"]["containers"][0], b["spec"]["containers"][0]
    assert ca["image"] is cb["image"]
    assert ca["args"][0] is cb["args"][0]
    assert a["status"]["conditions"][0]["type"] is b["status"]["conditions"][0]["type"]
    assert ca["args"][1] is not cb["args"][1]  # longer than 64: not interned
