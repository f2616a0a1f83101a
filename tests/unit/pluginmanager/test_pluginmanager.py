"""The plugin manager against real registration sockets: plugins served by
grpc.aio servers on Unix sockets in a temporary registry dir."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.pluginmanager import CSI_PLUGIN, DEVICE_PLUGIN, PluginError
from kubelet.pluginmanager.manager import PluginManager
from kubelet.testing.wait import wait_for_async
from tests.unit.pluginmanager.fixtures import FakePlugin


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
    await wait_for_async("early.statuses", lambda: early.statuses, 20, every=0.02, retry_on=())
    assert early.statuses == [(True, "")]
    late = await start("late.example.com", "late-reg.sock", endpoint="/x/csi.sock")
    await wait_for_async("late.statuses", lambda: late.statuses, 20, every=0.02, retry_on=())
    assert late.statuses == [(True, "")]
    assert handler.calls == [
        ("validate", "early.example.com", str(reg / "early-reg.sock")),
        ("register", "early.example.com", str(reg / "early-reg.sock")),
        ("validate", "late.example.com", "/x/csi.sock"),
        ("register", "late.example.com", "/x/csi.sock"),
    ]
    assert [p.name for p in pm.registered()] == ["early.example.com", "late.example.com"]
    os.unlink(reg / "late-reg.sock")
    await wait_for_async(
        "len(handler.calls) == 5", lambda: len(handler.calls) == 5, 20, every=0.02, retry_on=()
    )
    assert handler.calls[4] == ("deregister", "late.example.com", "/x/csi.sock")
    assert [p.name for p in pm.registered()] == ["early.example.com"]


async def test_refused_plugins_are_told_why(manager):
    pm, handler, reg, start, run = manager
    run()
    dev = await start("vendor.com/gpu", "gpu.sock", ptype=DEVICE_PLUGIN)
    await wait_for_async("dev.statuses", lambda: dev.statuses, 20, every=0.02, retry_on=())
    assert dev.statuses[0] == (
        False,
        f"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at "
        f"socket {reg / 'gpu.sock'}",
    )
    handler.reject = "no supported version"
    bad = await start("bad.example.com", "bad.sock")
    await wait_for_async("bad.statuses", lambda: bad.statuses, 20, every=0.02, retry_on=())
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
    await wait_for_async(
        '(True, "") in p.statuses', lambda: (True, "") in p.statuses, 20, every=0.02, retry_on=()
    )
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
    await wait_for_async("first.statuses", lambda: first.statuses, 20, every=0.02, retry_on=())
    await first.stop()  # grpc removes the socket file
    (reg / "d.sock").unlink(missing_ok=True)
    second = await start("d.example.com", "d.sock")
    await wait_for_async("second.statuses", lambda: second.statuses, 20, every=0.02, retry_on=())
    await wait_for_async(
        '[c[0] for c in handler.calls].count("register") == 2',
        lambda: [c[0] for c in handler.calls].count("register") == 2,
        20,
        every=0.02,
        retry_on=(),
    )
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
    await wait_for_async("nested.statuses", lambda: nested.statuses, 20, every=0.02, retry_on=())
    # Something registered after all of those shows they were looked at.
    last = await start("last.example.com", "last.sock")
    await wait_for_async("last.statuses", lambda: last.statuses, 20, every=0.02, retry_on=())
    assert hidden.statuses == []
    names = [c[1] for c in handler.calls if c[0] == "register"]
    assert names == ["nested.example.com", "last.example.com"]  # the link is not followed
