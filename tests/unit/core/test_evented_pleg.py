"""EventedPLEG's cache writes: a pod whose last sandbox and container are gone
leaves no entry behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kubelet.container.cache import NativeCache, ReferenceCache
from kubelet.container.runtime import PodStatus, SandboxStatus
from kubelet.cri.api import api_pb2 as pb
from kubelet.metrics import REGISTRY
from kubelet.pleg.evented import EventedPLEG


def event(uid: str, etype: int, cid: str) -> pb.ContainerEventResponse:
    return pb.ContainerEventResponse(
        container_id=cid,
        container_event_type=etype,
        pod_sandbox_status=pb.PodSandboxStatus(
            id="sb-" + uid, metadata=pb.PodSandboxMetadata(uid=uid)
        ),
    )


class Runtime:
    def __init__(self, events: list[pb.ContainerEventResponse]) -> None:
        self.events = events

    async def get_container_events(
        self, on_connected: Callable[[], None] | None = None
    ) -> AsyncIterator[pb.ContainerEventResponse]:
        if on_connected is not None:
            on_connected()
        for ev in self.events:
            yield ev


class Generic:
    """get_status answers from `left`: the pods that still have a sandbox."""

    period = 1.0

    def __init__(self, left: set[str]) -> None:
        self.left = left
        self.events: asyncio.Queue[Any] = asyncio.Queue()

    async def get_status(self, uid: str) -> PodStatus:
        if uid in self.left:
            return PodStatus(uid, sandboxes=[SandboxStatus("sb-" + uid, False, 1, 0)])
        return PodStatus(uid)


class RuntimeManager:
    async def status_from_event(self, ev: pb.ContainerEventResponse) -> PodStatus:
        u = ev.pod_sandbox_status.metadata.uid
        return PodStatus(u, sandboxes=[SandboxStatus("sb-" + u, True, 1, 0)])


@pytest.mark.parametrize("cache_cls", [ReferenceCache, NativeCache])
async def test_deleted_pods_leave_no_cache_entry(cache_cls: Any) -> None:
    evs = []
    for i in range(10):
        evs.append(event(f"u{i}", pb.CONTAINER_STARTED_EVENT, f"c{i}"))
    for i in range(10):
        evs.append(event(f"u{i}", pb.CONTAINER_DELETED_EVENT, f"c{i}"))
    cache = cache_cls()
    generic = Generic(left={"u0"})
    pleg = EventedPLEG(Runtime(evs), RuntimeManager(), generic, cache)
    await pleg._consume()
    assert generic.events.qsize() == 20  # STARTED and REMOVED events still go out
    # u0 still has its sandbox; the other nine are gone from the runtime.
    assert len(cache) == 1 and cache.get("u0")[0].sandboxes
    assert pleg.events_seen == 20


async def test_a_runtime_without_events_hands_over_to_the_relist_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """containerd 1.6 answers UNIMPLEMENTED: no five retries with relists in
    between, the generic PLEG gets its normal period back straight away."""
    from kubelet.cri import errors

    class NoEvents:
        calls = 0

        async def get_container_events(
            self, on_connected: Callable[[], None] | None = None
        ) -> AsyncIterator[pb.ContainerEventResponse]:
            NoEvents.calls += 1
            raise errors.UnimplementedError("GetContainerEvents", "unknown method")
            yield  # an async generator, as the remote client's

    class Relisting(Generic):
        relists = 0

        async def relist(self) -> None:
            self.relists += 1

    generic = Relisting(set())
    pleg = EventedPLEG(NoEvents(), RuntimeManager(), generic, ReferenceCache())
    await asyncio.wait_for(pleg.run(asyncio.Event()), 5)
    assert NoEvents.calls == 1 and generic.relists == 0
    assert pleg.fell_back and generic.period == 1.0
    assert "does not serve GetContainerEvents" in caplog.text


async def test_a_broken_stream_is_retried_then_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubelet.cri import errors
    from kubelet.pleg import evented

    class Broken:
        calls = 0

        async def get_container_events(
            self, on_connected: Callable[[], None] | None = None
        ) -> AsyncIterator[pb.ContainerEventResponse]:
            Broken.calls += 1
            raise errors.CRIError("GetContainerEvents", "stream reset")
            yield

    class Relisting(Generic):
        relists = 0

        async def relist(self) -> None:
            self.relists += 1

    generic = Relisting(set())
    pleg = EventedPLEG(Broken(), RuntimeManager(), generic, ReferenceCache())
    monkeypatch.setattr(evented, "RETRY_DELAY", 0.0)
    errs, conns = _sample(CONN_ERR), _sample(CONN)
    await asyncio.wait_for(pleg.run(asyncio.Event()), 5)
    assert Broken.calls == evented.MAX_STREAM_RETRIES == generic.relists
    assert _sample(CONN_ERR) - errs == evented.MAX_STREAM_RETRIES  # never connected
    assert _sample(CONN) == conns
    assert pleg.fell_back and generic.period == 1.0


CONN = "kubelet_evented_pleg_connection_success_count_total"
CONN_ERR = "kubelet_evented_pleg_connection_error_count_total"
LATENCY = "kubelet_evented_pleg_connection_latency_seconds"


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_stream_connections_ends_and_event_latency_are_measured() -> None:
    """A stream that opens, carries two events (one created 1 s ago, one without
    a creation time) and ends: one connection, one error (upstream counts an EOF
    too), one latency observed, of at least the event's age."""
    import time

    old = event("u1", pb.CONTAINER_STARTED_EVENT, "c1")
    old.created_at = time.time_ns() - 1_000_000_000
    untimed = event("u1", pb.CONTAINER_STOPPED_EVENT, "c1")

    class Relisting(Generic):
        async def relist(self) -> None:
            pass

    stop = asyncio.Event()

    class Once(Runtime):
        async def get_container_events(
            self, on_connected: Callable[[], None] | None = None
        ) -> AsyncIterator[pb.ContainerEventResponse]:
            async for ev in super().get_container_events(on_connected):
                yield ev
            stop.set()  # then the run ends instead of retrying

    before = {
        "conn": _sample(CONN), "err": _sample(CONN_ERR), "n": _sample(LATENCY + "_count"),
        "le05": _sample(LATENCY + "_bucket", le="0.5"),
    }  # fmt: skip
    pleg = EventedPLEG(Once([old, untimed]), RuntimeManager(), Relisting(set()), ReferenceCache())
    await asyncio.wait_for(pleg.run(stop), 5)
    assert pleg.events_seen == 2
    assert _sample(CONN) - before["conn"] == 1
    assert _sample(CONN_ERR) - before["err"] == 1
    assert _sample(LATENCY + "_count") - before["n"] == 1
    assert _sample(LATENCY + "_bucket", le="0.5") == before["le05"]  # 1 s or more


async def test_events_dropped_on_a_full_channel_are_counted() -> None:
    generic = Generic(left=set())
    generic.events = asyncio.Queue(maxsize=1)
    evs = [
        event("u1", pb.CONTAINER_STARTED_EVENT, "c1"),
        event("u2", pb.CONTAINER_STARTED_EVENT, "c2"),
    ]
    before = _sample("kubelet_pleg_discard_events_total")
    await EventedPLEG(Runtime(evs), RuntimeManager(), generic, ReferenceCache())._consume()
    assert generic.events.qsize() == 1
    assert _sample("kubelet_pleg_discard_events_total") == before + 1
