"""The kernel memcg threshold notifier against a real cgroup v1 memory cgroup:
the kernel signals the eventfd when usage crosses the level, and that crossing
alone (the periodic pass pushed out to an hour) brings an eviction pass."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction import eviction_manager
from kubelet.eviction import signals as sig
from kubelet.eviction.eviction_manager import EvictionManager, EvictionSources, volumes_only
from kubelet.eviction.memcg_notifier import CgroupNotifier, MemcgCgroups
from kubelet.eviction.signals import Observation
from kubelet.testing.wait import wait_for, wait_for_async

MiB = 2**20
ROOT = Path("/sys/fs/cgroup")
# Allocates 64 MiB, touches every page (so it is charged), then waits.
EATER = "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok', flush=True)\nimport time; time.sleep(600)"


@pytest.fixture
def memcg() -> Iterator[Path]:
    if not (ROOT / "memory" / "cgroup.event_control").exists() or os.geteuid() != 0:
        pytest.skip("memcg notifications need root and the cgroup v1 memory controller")
    path = ROOT / "memory" / f"kpy-memcg-test-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        wait_for("the test cgroup empty", lambda: not (path / "cgroup.procs").read_text().strip())
        path.rmdir()


def usage(path: Path) -> int:
    return int((path / "memory.usage_in_bytes").read_text())


def eat(path: Path) -> subprocess.Popen[str]:
    def join() -> None:
        (path / "cgroup.procs").write_text(str(os.getpid()))

    p = subprocess.Popen([sys.executable, "-c", EATER], stdout=subprocess.PIPE, text=True,
                         preexec_fn=join)  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().strip() == "ok"
    return p


def test_the_kernel_signals_a_crossing(memcg: Path) -> None:
    n = CgroupNotifier(str(memcg), usage(memcg) + 16 * MiB)
    try:
        assert n.drain() == 0
        p = eat(memcg)
        assert wait_for("a memcg event", n.drain, timeout=30) >= 1
        p.kill()
        p.wait()
    finally:
        n.close()


async def test_a_crossing_brings_an_eviction_pass_before_the_period(
    memcg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eviction_manager, "MONITORING_PERIOD", 3600.0)
    config = KubeletConfiguration()
    config.eviction_hard = {"memory.available": "100Mi"}
    config.enforce_node_allocatable = ["pods"]
    # allocatableMemory.available met once the test cgroup's usage grows 16 MiB;
    # memory.available (the host's root cgroup) far out of reach.
    capacity = usage(memcg) + 16 * MiB + 100 * MiB
    passes: list[int] = []

    def observe() -> dict[str, Observation]:
        passes.append(1)
        return {
            sig.MEMORY: Observation(2**50, 2**50),
            sig.ALLOCATABLE_MEMORY: Observation(capacity, capacity),
        }

    async def evict(*_a: object, **_k: object) -> None:
        return None

    m = EvictionManager(
        config, "/", EvictionSources(list, observe, dict, volumes_only(lambda _u: {})), evict,
        memcg=MemcgCgroups(1, str(ROOT), memcg.name),
    )  # fmt: skip
    assert [n.cgroup for n in m.notifiers] == [str(ROOT / "memory"), str(memcg)]
    stop = asyncio.Event()
    task = asyncio.create_task(m.run(stop))
    await wait_for_async("the first pass", lambda: len(passes) == 1)
    p = await asyncio.get_running_loop().run_in_executor(None, eat, memcg)
    await wait_for_async("a second pass, woken by the crossing", lambda: len(passes) >= 2, 30)
    stop.set()
    await task
    assert all(n.current is None for n in m.notifiers)  # registrations closed
    p.kill()
    p.wait()
