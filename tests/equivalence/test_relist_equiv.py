"""Native relist differ == pure-Python reference, on random relist sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.cri.api import api_pb2 as pb  # noqa: E402
from kubelet.pleg.differ import NativeRelistDiffer, ReferenceRelistDiffer  # noqa: E402

PODS = [f"pod-{i}" for i in range(6)]
STATES = [pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_EXITED, pb.CONTAINER_UNKNOWN, 7]

# One relist: for each of a fixed universe of IDs, absent or present with a
# pod and a state; IDs are unique, as in a real runtime.
container_slot = st.one_of(st.none(), st.tuples(st.sampled_from(PODS), st.sampled_from(STATES)))
sandbox_slot = st.one_of(st.none(), st.tuples(st.sampled_from(PODS), st.booleans()))
relist = st.tuples(
    st.lists(sandbox_slot, min_size=4, max_size=4),
    st.lists(container_slot, min_size=12, max_size=12),
)


def encode(sandboxes: list, containers: list) -> tuple[bytes, bytes]:
    sb = pb.ListPodSandboxResponse(
        items=[
            pb.PodSandbox(
                id=f"s{i}",
                metadata=pb.PodSandboxMetadata(name="n", uid=slot[0], namespace="default"),
                state=pb.SANDBOX_READY if slot[1] else pb.SANDBOX_NOTREADY,
                labels={"io.kubernetes.pod.uid": slot[0]},
            )
            for i, slot in enumerate(sandboxes)
            if slot is not None
        ]
    )
    cs = pb.ListContainersResponse(
        containers=[
            pb.Container(
                id=f"c{i:02d}",
                pod_sandbox_id="s0",
                metadata=pb.ContainerMetadata(name=f"c{i}"),
                state=slot[1],
                labels={"io.kubernetes.container.name": f"c{i}", "io.kubernetes.pod.uid": slot[0]},
                annotations={"io.kubernetes.container.hash": "abc"},
            )
            for i, slot in enumerate(containers)
            if slot is not None
        ]
    )
    return sb.SerializeToString(), cs.SerializeToString()


@settings(max_examples=300, deadline=None)
@given(st.lists(relist, min_size=1, max_size=8))
def test_same_events_and_changed_pods_every_relist(sequence: list) -> None:
    ref, nat = ReferenceRelistDiffer(), NativeRelistDiffer()
    for sandboxes, containers in sequence:
        s, c = encode(sandboxes, containers)
        assert nat.diff(s, c) == ref.diff(s, c)
        counts = ("running_pods", "running_containers", "exited_containers", "changes")
        assert [getattr(nat, k) for k in counts] == [getattr(ref, k) for k in counts]
        assert sorted(nat.pod_ids()) == sorted(ref.pod_ids())


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_never_crashes_and_changes_nothing(junk: bytes) -> None:
    nat = NativeRelistDiffer()
    s, c = encode([("pod-0", True)], [("pod-0", pb.CONTAINER_RUNNING)])
    nat.diff(s, c)
    try:
        nat.diff(s, junk)
    except ValueError:
        # a rejected relist leaves the previous state: the next good one is quiet
        assert nat.diff(s, c) == ([], [])
