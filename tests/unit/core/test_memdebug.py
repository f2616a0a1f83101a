"""The memory debugging hook (kubelet/util/memdebug.py): off without its variable;
with it, SIGUSR2 writes the reports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tracemalloc
from pathlib import Path

import pytest

from kubelet.util import memdebug


class Leaf:
    def __init__(self) -> None:
        self.by_uid = {"a": {1, 2}, "b": {3}}
        self.empty: dict[str, int] = {}


class Differ:
    def pod_ids(self) -> list[str]:
        return ["x", "y", "z"]


class Root:
    def __init__(self) -> None:
        self.leaf = Leaf()
        self.again = self.leaf  # visited once
        self.items = [1, 2]
        self.differ = Differ()


def test_container_sizes_follow_attributes() -> None:
    sizes = memdebug.container_sizes(Root())
    assert sizes["Root.items"] == 2
    assert sizes["Root.leaf.by_uid"] == 2
    assert sizes["Root.leaf.by_uid[*]"] == 3
    assert sizes["Root.differ"] == 3
    assert "Root.leaf.empty" not in sizes
    assert not any(k.startswith("Root.again") for k in sizes)


async def test_off_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(memdebug.ENV, raising=False)
    assert memdebug.install(asyncio.get_running_loop(), Root()) is None


async def test_sigusr2_writes_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memdebug.ENV, str(tmp_path))
    monkeypatch.setenv(memdebug.ENV + "_FRAMES", "4")
    loop = asyncio.get_running_loop()
    was_tracing = tracemalloc.is_tracing()
    try:
        md = memdebug.install(loop, Root())
        assert md is not None
        os.kill(os.getpid(), signal.SIGUSR2)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if md.n == 1:
                break
        keep = [Leaf() for _ in range(300)]  # noqa: F841 (kept alive)
        md.dump()
        report = json.loads((tmp_path / "mem-1.json").read_text())
        assert report["containers"]["Root.leaf.by_uid[*]"] == 3
        assert report["rss_kib"] > 0
        assert report["objects"]["Leaf"] >= 300
        diff = (tmp_path / "mem-1.txt").read_text()
        assert "keep = [Leaf()" in diff  # the kept objects, by traceback
    finally:
        loop.remove_signal_handler(signal.SIGUSR2)
        if not was_tracing:
            tracemalloc.stop()
