"""The kernels the kubelet runs (native unless KUBELET_IMPL=reference)."""

from __future__ import annotations

import pytest

import kubelet
from kubelet.cri.api import api_pb2 as pb
from kubelet.pleg.differ import NativeRelistDiffer, ReferenceRelistDiffer, RelistDiffer
from kubelet.pleg.pleg import PodLifecycleEvent
from kubelet.util.workqueue import NativeWorkQueue, ReferenceWorkQueue, WorkQueue


def test_the_product_runs_the_native_kernels() -> None:
    if kubelet.__impl__ == "native":
        assert RelistDiffer is NativeRelistDiffer and WorkQueue is NativeWorkQueue
    else:
        assert RelistDiffer is ReferenceRelistDiffer and WorkQueue is ReferenceWorkQueue


def containers(*items: tuple[str, str, int]) -> bytes:
    return pb.ListContainersResponse(
        containers=[
            pb.Container(id=cid, state=state, labels={"io.kubernetes.pod.uid": uid})  # type: ignore[arg-type]
            for cid, uid, state in items
        ]
    ).SerializeToString()


def sandboxes(*items: tuple[str, str, bool]) -> bytes:
    return pb.ListPodSandboxResponse(
        items=[
            pb.PodSandbox(
                id=sid,
                metadata=pb.PodSandboxMetadata(uid=uid),
                state=pb.SANDBOX_READY if ready else pb.SANDBOX_NOTREADY,
            )
            for sid, uid, ready in items
        ]
    ).SerializeToString()


def test_pleg_transitions() -> None:
    d = RelistDiffer()
    ev, changed = d.diff(
        sandboxes(("s1", "p1", True)), containers(("c1", "p1", pb.CONTAINER_RUNNING))
    )
    assert ev == [
        PodLifecycleEvent("p1", "ContainerStarted", "c1"),
        PodLifecycleEvent("p1", "ContainerStarted", "s1"),
    ]
    assert changed == ["p1"]
    assert (d.running_pods, d.running_containers) == (1, 1)
    # the running container vanished: died and removed; the sandbox stopped
    ev, _ = d.diff(sandboxes(("s1", "p1", False)), b"")
    assert ev == [
        PodLifecycleEvent("p1", "ContainerDied", "c1"),
        PodLifecycleEvent("p1", "ContainerRemoved", "c1"),
        PodLifecycleEvent("p1", "ContainerDied", "s1"),
    ]
    assert d.running_pods == 0
    ev, _ = d.diff(b"", b"")
    assert ev == [PodLifecycleEvent("p1", "ContainerRemoved", "s1")]
    assert not d.known("p1")


def test_bad_bytes_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="undecodable"):
        RelistDiffer().diff(b"", b"\x0a\xff\xff")


def test_work_queue_overwrites_and_orders() -> None:
    now = [100.0]
    q = WorkQueue(lambda: now[0])
    q.enqueue("a", 5)
    q.enqueue("b", 1)
    q.enqueue("a", 0.5)
    assert q.get_work() == []
    now[0] += 2
    assert q.get_work() == ["a", "b"]
    now[0] += 10
    assert q.get_work() == [] and len(q) == 0
