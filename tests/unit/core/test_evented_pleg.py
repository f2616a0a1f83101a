"""EventedPLEG's cache writes: a pod whose last sandbox and container are gone
leaves no entry behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubelet.container.cache import NativeCache, ReferenceCache
from kubelet.container.runtime import PodStatus, SandboxStatus
from kubelet.cri.api import api_pb2 as pb
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

    async def get_container_events(self) -> AsyncIterator[pb.ContainerEventResponse]:
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

        async def get_container_events(self) -> AsyncIterator[pb.ContainerEventResponse]:
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

        async def get_container_events(self) -> AsyncIterator[pb.ContainerEventResponse]:
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
    await asyncio.wait_for(pleg.run(asyncio.Event()), 5)
    assert Broken.calls == evented.MAX_STREAM_RETRIES == generic.relists
    assert pleg.fell_back and generic.period == 1.0
