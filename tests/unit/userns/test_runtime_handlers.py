"""What the runtime's Status says of its handlers: kept by RuntimeState, asked
by the user namespace manager (HandlerSupportsUserNamespaces) and reported
in Node.status.runtimeHandlers as upstream's RuntimeHandlers setter does."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.container.runtime import Mount, RunContainerOptions
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kubelet_pods import RecursiveReadOnlySupport
from kubelet.kuberuntime.kuberuntime_container_linux import cri_mounts
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


class Classes:
    async def lookup_runtime_handler(self, name: str) -> str:
        if name == "missing":
            raise LookupError(name)
        return {"fast": "kata", "plain": "runc"}[name]


async def test_recursive_read_only_support_follows_the_pods_handler() -> None:
    st = await state_with(handler("", True, rro=True), handler("runc", True, rro=True),
                          handler("kata", False, rro=False))  # fmt: skip
    assert st.handler_supports_recursive_read_only("") is True
    assert st.handler_supports_recursive_read_only("kata") is False
    assert st.handler_supports_recursive_read_only("gvisor") is False  # unknown: logged
    supports = RecursiveReadOnlySupport(st, Classes())

    def pod(rc: str | None) -> Any:
        return {"metadata": {"name": "p"}, "spec": {"runtimeClassName": rc} if rc else {}}

    assert [await supports(pod(rc)) for rc in (None, "plain", "fast", "missing")] == [
        True, True, False, False,
    ]  # fmt: skip
    # A runtime naming no handlers supports none.
    assert await RecursiveReadOnlySupport(await state_with(), None)(pod(None)) is False


def test_the_flag_reaches_the_cri_mount() -> None:
    opts = RunContainerOptions(mounts=[Mount("/d", "/h", read_only=True, recursive_read_only=True),
                                       Mount("/e", "/h2", read_only=True)])  # fmt: skip
    assert [m.recursive_read_only for m in cri_mounts(opts, None)] == [True, False]
