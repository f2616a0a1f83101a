"""SupplementalGroupsPolicy (beta, on at v1.34): the runtime's features reach
Node.status.features, a Strict pod is refused at admission on a node whose
runtime does not support it, and container statuses carry the user the
runtime reports."""

from __future__ import annotations

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.container.runtime import ContainerStatus, ContainerUser, LinuxUser, PodStatus
from kubelet.core_v1 import NodeFeatures
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime.kuberuntime_container import container_user
from kubelet.lifecycle.predicate import Admitter
from kubelet.nodestatus.machine import MachineInfo
from kubelet.nodestatus.setters import NodeInputs, compute_status
from kubelet.runtime_state import RuntimeState
from kubelet.status.generate import container_statuses
from kubelet.types import Node
from kubelet.util.clock import FakeClock

MESSAGE = "SupplementalGroupsPolicy=Strict is not supported in this node"


def node(features: NodeFeatures | None) -> Node:
    n: Node = {"metadata": {"name": "n"}, "status": {}}
    if features is not None:
        n["status"]["features"] = features
    return n


def pod(policy: str | None) -> dict:
    sc = {"supplementalGroupsPolicy": policy} if policy else {}
    return {"metadata": {"uid": "u", "name": "p", "namespace": "d"},
            "spec": {"securityContext": sc, "containers": [{"name": "c", "image": "i"}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "features", "refused"),
    [
        ("Strict", None, True),  # the runtime says nothing (or the gate is off)
        ("Strict", {}, True),
        ("Strict", {"supplementalGroupsPolicy": False}, True),
        ("Strict", {"supplementalGroupsPolicy": True}, False),
        ("Merge", None, False),
        (None, None, False),
    ],
)
def test_strict_needs_a_node_that_supports_it(
    policy: str | None, features: NodeFeatures | None, refused: bool
) -> None:
    r = Admitter(10, 1000, 1 << 30).admit("u", pod(policy), node(features))
    if refused:
        assert r is not None
        assert (r.reason, r.message) == ("SupplementalGroupsPolicyNotSupported", MESSAGE)
    else:
        assert r is None


async def state(features: pb.RuntimeFeatures | None) -> RuntimeState:
    rt = FakeRuntimeService()
    rt.features = features
    st = RuntimeState(rt, FakeImageService([]), FakeClock())
    await st.check()
    return st


@pytest.mark.parametrize(
    ("sent", "reported"),
    [(None, None), (pb.RuntimeFeatures(supplemental_groups_policy=False), False),
     (pb.RuntimeFeatures(supplemental_groups_policy=True), True)],
)  # fmt: skip
async def test_node_status_features_as_the_runtime_reports_them(
    sent: pb.RuntimeFeatures | None, reported: bool | None
) -> None:
    st = await state(sent)
    inp = NodeInputs(
        name="n", config=KubeletConfiguration(),
        machine=MachineInfo(2, 1 << 30, "m", "s", "b", "k", "os", "amd64"),
        kubelet_version="v1.34.4", runtime_features=lambda: st.node_features,
    )  # fmt: skip
    status = compute_status(inp, None)
    if reported is None:
        assert "features" not in status
    else:
        assert status["features"] == {"supplementalGroupsPolicy": reported}


def test_the_user_the_runtime_reports_reaches_the_container_status() -> None:
    st = pb.ContainerStatus(
        user=pb.ContainerUser(
            linux=pb.LinuxContainerUser(uid=1000, gid=3000, supplemental_groups=[3000, 4000])
        )
    )
    user = container_user(st)
    assert user == ContainerUser(LinuxUser(1000, 3000, (3000, 4000)))
    assert container_user(pb.ContainerStatus()) is None  # an old runtime: no user
    assert container_user(pb.ContainerStatus(user=pb.ContainerUser())) == ContainerUser(None)
    running = ContainerStatus("id", "c", "running", user=user)
    [entry] = container_statuses(
        [{"name": "c", "image": "i"}], PodStatus("u", containers=[running]), {}, False, {}
    )
    assert entry["user"] == {
        "linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [3000, 4000]}
    }
    no_user = ContainerStatus("id", "c", "running")
    [entry] = container_statuses(
        [{"name": "c", "image": "i"}], PodStatus("u", containers=[no_user]), {}, False, {}
    )
    assert "user" not in entry
