"""The plugin manager against real registration sockets: plugins served by
grpc.aio servers on Unix sockets in a temporary registry dir."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubelet.pluginmanager import CSI_PLUGIN, DEVICE_PLUGIN, PluginError
from kubelet.pluginmanager.api import registration_pb2 as pb
from kubelet.pluginmanager.api import registration_pb2_grpc as pb_grpc
from kubelet.pluginmanager.manager import PluginManager


class FakePlugin(pb_grpc.RegistrationServicer):
    """A plugin's registration service; records what the kubelet told it."""

    def __init__(self, ptype: str, name: str, endpoint: str = "", versions=("1.0.0",)) -> None:
        self.info = pb.PluginInfo(
            type=ptype, name=name, endpoint=endpoint, supported_versions=list(versions)
        )
        self.statuses: list[tuple[bool, str]] = []
        self.server: grpc.aio.Server | None = None

    async def GetInfo(self, request: Any, context: Any) -> pb.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        return pb.RegistrationStatusResponse()

    async def start(self, path: str) -> FakePlugin:
        self.server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{path}")
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)


class Handler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.reject = ""
        self.fail_register = 0  # fail this many registrations

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        self.calls.append(("validate", name, endpoint))
        if self.reject:
            raise PluginError(self.reject)

    async def register_plugin(
        self, name: str, endpoint: str, versions: list[str], timeout: float | None
    ) -> None:
        self.calls.append(("register", name, endpoint))
        if self.fail_register:
            self.fail_register -= 1
            raise RuntimeError("NodeGetInfo failed")

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        self.calls.append(("deregister", name, endpoint))


async def until(cond: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.02)


@pytest.fixture
async def manager(tmp_path: Path):
    reg = tmp_path / "reg"
    handler = Handler()
    pm = PluginManager(str(reg))
    pm.add_handler(CSI_PLUGIN, handler)
    stop = asyncio.Event()
    plugins: list[FakePlugin] = []
    reg.mkdir()

    async def start(name: str, file: str, ptype: str = CSI_PLUGIN, **kw: Any) -> FakePlugin:
        p = await FakePlugin(ptype, name, **kw).start(str(reg / file))
        plugins.append(p)
        return p

    task: asyncio.Task[None] | None = None

    def run() -> None:
        nonlocal task
        task = asyncio.ensure_future(pm.run(stop))

    yield pm, handler, reg, start, run
    stop.set()
    if task is not None:
        await task
    for p in plugins:
        await p.stop()


async def test_socket_present_at_start_and_created_later(manager):
    pm, handler, reg, start, run = manager
    early = await start("early.example.com", "early-reg.sock")
    run()
    await until(lambda: early.statuses)
    assert early.statuses == [(True, "")]
    late = await start("late.example.com", "late-reg.sock", endpoint="/x/csi.sock")
    await until(lambda: late.statuses)
    assert late.statuses == [(True, "")]
    assert handler.calls == [
        ("validate", "early.example.com", str(reg / "early-reg.sock")),
        ("register", "early.example.com", str(reg / "early-reg.sock")),
        ("validate", "late.example.com", "/x/csi.sock"),
        ("register", "late.example.com", "/x/csi.sock"),
    ]
    assert [p.name for p in pm.registered()] == ["early.example.com", "late.example.com"]
    os.unlink(reg / "late-reg.sock")
    await until(lambda: len(handler.calls) == 5)
    assert handler.calls[4] == ("deregister", "late.example.com", "/x/csi.sock")
    assert [p.name for p in pm.registered()] == ["early.example.com"]


async def test_refused_plugins_are_told_why(manager):
    pm, handler, reg, start, run = manager
    run()
    dev = await start("vendor.com/gpu", "gpu.sock", ptype=DEVICE_PLUGIN)
    await until(lambda: dev.statuses)
    assert dev.statuses[0] == (
        False,
        f"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at "
        f"socket {reg / 'gpu.sock'}",
    )
    handler.reject = "no supported version"
    bad = await start("bad.example.com", "bad.sock")
    await until(lambda: bad.statuses)
    assert bad.statuses[0] == (
        False,
        "RegisterPlugin error -- plugin validation failed with err: no supported version",
    )
    assert pm.registered() == []
    assert ("register", "bad.example.com", str(reg / "bad.sock")) not in handler.calls


async def test_failed_registration_is_retried(manager):
    pm, handler, _reg, start, run = manager
    handler.fail_register = 1
    run()
    p = await start("flaky.example.com", "flaky.sock")
    await until(lambda: (True, "") in p.statuses)
    assert p.statuses == [
        (False, "RegisterPlugin error -- plugin registration failed with err: NodeGetInfo failed"),
        (True, ""),
    ]
    assert [c[0] for c in handler.calls] == ["validate", "register", "validate", "register"]
    assert [x.name for x in pm.registered()] == ["flaky.example.com"]


async def test_recreated_socket_is_registered_again(manager):
    pm, handler, reg, start, run = manager
    run()
    first = await start("d.example.com", "d.sock")
    await until(lambda: first.statuses)
    await first.stop()  # grpc removes the socket file
    (reg / "d.sock").unlink(missing_ok=True)
    second = await start("d.example.com", "d.sock")
    await until(lambda: second.statuses)
    await until(lambda: [c[0] for c in handler.calls].count("register") == 2)
    kinds = [c[0] for c in handler.calls]
    assert kinds == ["validate", "register", "deregister", "validate", "register"]
    assert len(pm.registered()) == 1


async def test_dot_files_links_and_subdirs(manager):
    _pm, handler, reg, start, run = manager
    run()
    hidden = await start("hidden.example.com", ".hidden.sock")
    (reg / "sub").mkdir()
    nested = await start("nested.example.com", "sub/nested.sock")
    os.symlink(reg / "sub" / "nested.sock", reg / "link.sock")
    (reg / "notes.txt").write_text("not a socket")
    await until(lambda: nested.statuses)
    # Something registered after all of those shows they were looked at.
    last = await start("last.example.com", "last.sock")
    await until(lambda: last.statuses)
    assert hidden.statuses == []
    names = [c[1] for c in handler.calls if c[0] == "register"]
    assert names == ["nested.example.com", "last.example.com"]  # the link is not followed
