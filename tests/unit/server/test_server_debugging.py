"""The debugging handlers and their switches (server.go): what answers with
them on, what answers 405 or 404 with them off, /logs/ confined to the log
directory, /debug/flags/v, and the idle timeout of a log follow."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubelet.core_v1 import Container
from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import labels
from kubelet.kuberuntime.logs import LogOptions
from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.debugging import DISABLED_PREFIXES, DebugHandlers
from kubelet.types import Pod

ALLOW = ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow")


class View(s.NoPods):
    streaming_idle_timeout = 0.3

    def __init__(self) -> None:
        self.follow_done = asyncio.Event()

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        await write(b"line 1\n")
        if opts.follow:
            try:
                await asyncio.Event().wait()  # a container that never logs again
            finally:
                self.follow_done.set()


async def serve(debug: DebugHandlers, view: Any = None) -> tuple[Any, str]:
    v = view or View()
    app = s.kubelet_app(lambda: v, lambda: {"maxPods": 7}, [], ALLOW, debug)
    runner = await s.serve(app, "127.0.0.1", 0)
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def call(base: str, path: str, method: str = "GET", data: bytes = b"") -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, base + path, data=data, allow_redirects=False) as r:
            return r.status, await r.text()


async def test_switched_off_handlers_answer_as_upstream(tmp_path: Path) -> None:
    runner, base = await serve(DebugHandlers(enable_debugging_handlers=False))
    try:
        for prefix in DISABLED_PREFIXES:
            for method in ("GET", "POST"):
                got = await call(base, prefix + "x/y", method)
                assert got == (405, "Debug endpoints are disabled.\n"), prefix
        assert (await call(base, "/configz"))[0] == 404
        assert (await call(base, "/debug/flags/v", "PUT", b"3"))[0] == 404
        for path in ("/pods", "/metrics", "/metrics/probes", "/healthz"):
            assert (await call(base, path))[0] == 200, path
    finally:
        await runner.cleanup()
    each_off = DebugHandlers(
        enable_system_log_handler=False,
        enable_profiling_handler=False,
        enable_debug_flags_handler=False,
    )
    runner, base = await serve(each_off)
    try:
        assert await call(base, "/logs/") == (405, "logs endpoint is disabled.\n")
        assert await call(base, "/debug/pprof/heap") == (405, "profiling endpoint is disabled.\n")
        assert await call(base, "/debug/flags/v", "PUT", b"3") == (
            405,
            "flags endpoint is disabled.\n",
        )
        assert (await call(base, "/configz"))[0] == 200
        assert (await call(base, "/runningpods/"))[0] == 200
    finally:
        await runner.cleanup()


async def test_system_logs_stay_inside_the_log_directory(tmp_path: Path) -> None:
    logs, outside = tmp_path / "log", tmp_path / "secret"
    (logs / "pods").mkdir(parents=True)
    outside.mkdir()
    (outside / "shadow").write_text("root:x\n")
    (logs / "pods" / "a.log").write_text("hello\n")
    os.symlink(logs / "pods" / "a.log", logs / "inside.log")
    os.symlink(outside / "shadow", logs / "escape.log")
    os.symlink(outside, logs / "escape-dir")
    runner, base = await serve(DebugHandlers(system_log_dir=str(logs)))
    try:
        status, listing = await call(base, "/logs/")
        assert status == 200 and '<a href="pods/">pods/</a>' in listing
        assert await call(base, "/logs/pods/a.log") == (200, "hello\n")
        assert await call(base, "/logs/inside.log") == (200, "hello\n")
        assert (await call(base, "/logs/pods"))[0] == 301  # as Go's FileServer
        for path in ("/logs/escape.log", "/logs/escape-dir/shadow", "/logs/../secret/shadow",
                     "/logs/%2e%2e/secret/shadow"):  # fmt: skip
            status, body = await call(base, path)
            assert status == 404 and "root:x" not in body, path
    finally:
        await runner.cleanup()


async def test_debug_flags_set_the_log_verbosity() -> None:
    root = logging.getLogger()
    level = root.level
    runner, base = await serve(DebugHandlers())
    try:
        got = await call(base, "/debug/flags/v", "PUT", b"5")
        assert got == (200, "successfully set klog.logging.verbosity to 5\n")
        assert root.level == logging.DEBUG - 1  # V(5)
        assert (await call(base, "/debug/flags/v", "PUT", b"lots"))[0] == 400
        assert (await call(base, "/debug/flags/v"))[0] == 406
        assert (await call(base, "/debug/pprof/profile"))[0] == 501  # no Go profiler here
    finally:
        root.setLevel(level)
        await runner.cleanup()


@pytest.mark.parametrize("follow", [True, False])
async def test_log_follow_ends_after_the_streaming_idle_timeout(follow: bool) -> None:
    view = View()
    runner, base = await serve(DebugHandlers(), view)
    try:
        path = "/containerLogs/default/p/c" + ("?follow=true" if follow else "")
        async with asyncio.timeout(10):
            assert await call(base, path) == (200, "line 1\n")
        if follow:
            assert view.follow_done.is_set()  # the follow itself was stopped, not left running
    finally:
        await runner.cleanup()


async def test_checkpoint_is_a_debugging_handler(tmp_path: Path) -> None:
    """POST /checkpoint/... exists only with the debugging handlers (as
    upstream's InstallAuthRequiredHandlers) and a checkpoint directory (the
    ContainerCheckpoint gate); it is not among the 405 paths."""
    for debug, want in (
        (DebugHandlers(checkpoint_dir=str(tmp_path)), 404),  # served: "pod does not exist"
        (DebugHandlers(enable_debugging_handlers=False, checkpoint_dir=str(tmp_path)), 404),
        (DebugHandlers(), 404),
    ):
        runner, base = await serve(debug)
        try:
            status, text = await call(base, "/checkpoint/ns/pod/c", "POST")
            assert status == want
            assert (text == "pod does not exist") == bool(
                debug.enable_debugging_handlers and debug.checkpoint_dir
            )
        finally:
            await runner.cleanup()


class _Recorder:
    """A runtime that has one running container for any pod and records where it
    was asked to write the archive."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.locations: list[str] = []

    async def list_containers(self, _filter: Any) -> list[Any]:
        return [
            pb.Container(id="c1", labels={labels.CONTAINER_NAME: n}, created_at=1)
            for n in self.names
        ]

    async def checkpoint_container(self, cid: str, location: str, timeout: int) -> None:
        self.locations.append(location)


class _AnyPod(View):
    """A view that says yes to any pod and container name, as a static pod with a
    hostile name would (the API never admits such names; this is defence in depth)."""

    def __init__(self, rt: _Recorder) -> None:
        super().__init__()
        self.rt = rt
        self.runtime_service = rt  # type: ignore[assignment]

    def get_pod_by_name(self, namespace_: str, name: str) -> Pod | None:
        containers: list[Container] = [{"name": n} for n in self.rt.names]
        pod: Pod = {"metadata": {"uid": "u", "name": name, "namespace": namespace_},
                    "spec": {"containers": containers}}  # fmt: skip
        return pod


@pytest.mark.parametrize(
    ("path", "container"),
    [
        ("/checkpoint/ns/..%2F..%2Fetc/c", "c"),
        ("/checkpoint/..%2F..%2F..%2Ftmp/pod/c", "c"),
        ("/checkpoint/ns/pod/..%2F..%2Fx", "../../x"),
        ("/checkpoint/ns/pod/%2Fetc%2Fcron.d%2Fx", "/etc/cron.d/x"),
    ],
)
async def test_checkpoint_archives_never_leave_the_checkpoint_directory(
    tmp_path: Path, path: str, container: str
) -> None:
    """Names in the URL are hostile: whatever they decode to, the runtime is only
    ever asked to write directly inside <root-dir>/checkpoints, or not at all."""
    directory = str(tmp_path / "checkpoints")
    rt = _Recorder(container)
    runner, base = await serve(DebugHandlers(checkpoint_dir=directory), _AnyPod(rt))
    try:
        status, _ = await call(base, path, "POST")
    finally:
        await runner.cleanup()
    assert all(os.path.dirname(loc) == directory for loc in rt.locations), rt.locations
    assert status in (200, 400, 404)
    # A name with a slash in it cannot make an archive name that stays in the directory.
    assert status != 200 or "/" not in container
