"""Events through the event client against the real API server."""

from __future__ import annotations

import asyncio
import json

import pytest

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient
from kubelet.events import NORMAL, WARNING, EventRecorder
from kubelet.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


async def test_repeated_events_are_counted_and_similar_ones_aggregated(
    control_plane: ControlPlane,
) -> None:
    name = "py-node-events"
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(name)), qps=50, burst=100)
    rec = EventRecorder(name, client)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))
    ref = {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"}
    try:
        for _ in range(3):
            rec.event(ref, NORMAL, "Starting", "Starting kubelet.")
        for i in range(12):
            rec.event(ref, WARNING, "Flapping", f"attempt {i}")
        for _ in range(100):
            if rec.queue.empty() and rec.sent >= 15:
                break
            await asyncio.sleep(0.05)
        out = control_plane.kubectl(
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            f"involvedObject.name={name}",
            "-o",
            "json",
        ).stdout
        items = json.loads(out)["items"]
        starting = [e for e in items if e["reason"] == "Starting"]
        assert len(starting) == 1 and starting[0]["count"] == 3
        assert starting[0]["source"] == {"component": "kubelet", "host": name}
        flapping = [e for e in items if e["reason"] == "Flapping"]
        # 10 distinct messages, then the rest fold into one combined Event
        assert len(flapping) == 11
        combined = [e for e in flapping if e["message"].startswith("(combined from similar")]
        assert len(combined) == 1 and combined[0]["count"] == 2
    finally:
        stop.set()
        await task
        await client.close()


async def test_the_recorder_forgets_the_least_recent_objects_beyond_its_cache(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that churns pods forever keeps a bounded record of past events:
    with room for 4 objects, the 6th object pushes out the 1st, whose repeat
    then creates a new Event instead of bumping the old one's count."""
    monkeypatch.setattr("kubelet.events.CACHE_ENTRIES", 4)
    name = "py-node-events-lru"
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(name)), qps=50, burst=100)
    rec = EventRecorder(name, client)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))

    def ref(i: int) -> dict[str, str]:
        return {"kind": "Node", "name": f"{name}-{i}", "uid": f"{name}-{i}", "apiVersion": "v1"}

    async def drained(sent: int) -> None:
        for _ in range(200):
            if rec.queue.empty() and rec.sent >= sent:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"sent {rec.sent} of {sent}")

    try:
        rec.event(ref(0), NORMAL, "Starting", "Starting kubelet.")
        rec.event(ref(0), NORMAL, "Starting", "Starting kubelet.")  # counted: still cached
        for i in range(1, 6):
            rec.event(ref(i), NORMAL, "Starting", "Starting kubelet.")
        await drained(7)
        assert len(rec._seen) == len(rec._aggregate) == len(rec._spam) == 4
        rec.event(ref(0), NORMAL, "Starting", "Starting kubelet.")  # forgotten: a new Event
        await drained(8)
        out = control_plane.kubectl(
            "get", "events", "-n", "default",
            "--field-selector", f"involvedObject.name={name}-0", "-o", "json",
        ).stdout  # fmt: skip
        counts = sorted(e["count"] for e in json.loads(out)["items"])
        assert counts == [1, 2]
    finally:
        stop.set()
        await task
        await client.close()


async def test_an_annotated_event_keeps_its_annotations(control_plane: ControlPlane) -> None:
    """AnnotatedEventf: the eviction manager's Evicted event says in its
    annotations what was starved; the API server stores them on the Event."""
    name = "py-node-events-annotated"
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(name)), qps=50, burst=100)
    rec = EventRecorder(name, client)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))
    ref = {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"}
    annotations = {"starved_resource": "memory", "offending_containers": "c"}
    try:
        rec.annotated_event(ref, annotations, WARNING, "Evicted", "low on memory")
        rec.event(ref, NORMAL, "Starting", "Starting kubelet.")
        for _ in range(100):
            if rec.queue.empty() and rec.sent >= 2:
                break
            await asyncio.sleep(0.05)
        out = control_plane.kubectl(
            "get", "events", "-n", "default",
            "--field-selector", f"involvedObject.name={name}", "-o", "json",
        ).stdout  # fmt: skip
        by_reason = {e["reason"]: e for e in json.loads(out)["items"]}
        assert by_reason["Evicted"]["metadata"]["annotations"] == annotations
        assert "annotations" not in by_reason["Starting"]["metadata"]
    finally:
        stop.set()
        await task
        await client.close()
