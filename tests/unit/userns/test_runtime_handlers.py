"""What the runtime's Status says of its handlers: kept by RuntimeState, asked
by the user namespace manager (HandlerSupportsUserNamespaces) and reported
in Node.status.runtimeHandlers as upstream's RuntimeHandlers setter does."""

from __future__ import annotations

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.nodestatus.machine import MachineInfo
from kubelet.nodestatus.setters import NodeInputs, compute_status
from kubelet.runtime_state import RuntimeState
from kubelet.util.clock import FakeClock

MACHINE = MachineInfo(2, 1 << 30, "m", "s", "b", "k", "os", "amd64")


def handler(name: str, userns: bool, rro: bool = True) -> pb.RuntimeHandler:
    return pb.RuntimeHandler(
        name=name,
        features=pb.RuntimeHandlerFeatures(user_namespaces=userns, recursive_read_only_mounts=rro),
    )


def inputs(st: RuntimeState) -> NodeInputs:
    return NodeInputs(
        name="n",
        config=KubeletConfiguration(),
        machine=MACHINE,
        kubelet_version="v1.34.4",
        runtime_handlers=lambda: st.node_runtime_handlers,
    )


async def state_with(*handlers: pb.RuntimeHandler) -> RuntimeState:
    rt = FakeRuntimeService()
    rt.runtime_handlers = list(handlers)
    st = RuntimeState(rt, FakeImageService([]), FakeClock())
    await st.check()
    return st


async def test_handlers_as_the_runtime_names_them() -> None:
    st = await state_with(handler("", True), handler("runc", True), handler("kata", False))
    assert st.handler_supports_user_namespaces("") is True
    assert st.handler_supports_user_namespaces("kata") is False
    with pytest.raises(LookupError):
        st.handler_supports_user_namespaces("gvisor")
    inp = inputs(st)
    assert compute_status(inp, None)["runtimeHandlers"] == [
        {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
        {"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
        {"name": "kata", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}},
    ]


async def test_a_runtime_naming_no_handlers_supports_none_and_reports_none() -> None:
    st = await state_with()
    assert st.handler_supports_user_namespaces("") is False
    assert st.handler_supports_user_namespaces("anything") is False
    inp = inputs(st)
    assert "runtimeHandlers" not in compute_status(inp, None)


async def test_a_handler_without_features_supports_nothing() -> None:
    st = await state_with(pb.RuntimeHandler(name=""))
    assert st.handler_supports_user_namespaces("") is False
