"""The node shutdown manager against a fake logind connection: the inhibit
delay raised through a drop-in, the lock taken, held and let go, what a
shutdown and a cancellation do to the node status, admission and the pods,
the state file, the reconnect, and running without a system bus."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
from pathlib import Path
from typing import Any

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.features import FeatureGate
from kubelet.nodeshutdown import manager as mgr
from kubelet.nodeshutdown.groups import GracePeriodByPriority
from kubelet.nodeshutdown.manager import NodeShutdownManager, shutdown_periods
from kubelet.nodeshutdown.storage import STATE_FILE, parse_go_time
from kubelet.status.disruption import KubeletTermination
from kubelet.testing.login1 import read_inhibit_delay
from kubelet.testing.wait import wait_for_async


class FakeLogind:
    """A logind connection: locks are real pipes, so a leaked or doubly
    closed lock shows."""

    def __init__(self, delay: float, conf_dir: str, reload_works: bool = True) -> None:
        self.delay = delay
        self.conf_dir = conf_dir
        self.reload_works = reload_works
        self.reloads = 0
        self.pipes: list[tuple[int, int]] = []
        self.events: asyncio.Queue[bool | None] = asyncio.Queue()
        self.closed = False

    async def current_inhibit_delay(self) -> float:
        return self.delay

    async def inhibit_shutdown(self) -> int:
        r, w = os.pipe()
        self.pipes.append((r, w))
        return w

    def release_inhibit_lock(self, fd: int) -> None:
        os.close(fd)

    async def reload_logind_conf(self) -> None:
        self.reloads += 1
        if self.reload_works:
            self.delay = read_inhibit_delay(self.conf_dir) / 1e6

    async def monitor_shutdown(self) -> asyncio.Queue[bool | None]:
        return self.events

    def close(self) -> None:
        self.closed = True

    def held(self) -> int:
        """Locks whose write end is still open (the read end is not at EOF)."""
        return sum(1 for r, _ in self.pipes if not select.select([r], [], [], 0)[0])


class Node:
    def __init__(self, tmp: Path, delay: float = 5, reload_works: bool = True) -> None:
        self.conf = str(tmp / "logind")
        self.fakes: list[FakeLogind] = []
        self.delay, self.reload_works = delay, reload_works
        self.pods = [pod("web", 0, 30), pod("db", 1000, 5), pod("dns", 2_000_000_000, 60)]
        self.kills: list[tuple[str, int, KubeletTermination]] = []
        self.status_changes = 0
        self.events: list[tuple[str, str, str]] = []
        self.m = NodeShutdownManager(
            [GracePeriodByPriority(0, 10), GracePeriodByPriority(2_000_000_000, 5)],
            self.kill, lambda: list(self.pods), str(tmp), self.changed,
            lambda t, r, msg: self.events.append((t, r, msg)), self.connect,
            logind_conf_dir=os.path.join(self.conf, "logind.conf.d"),
        )  # fmt: skip
        self.stop = asyncio.Event()

    async def connect(self) -> FakeLogind:
        fake = FakeLogind(self.fakes[-1].delay if self.fakes else self.delay, self.conf,
                          self.reload_works)  # fmt: skip
        self.fakes.append(fake)
        return fake

    async def kill(self, p: dict[str, Any], grace: int, why: KubeletTermination) -> None:
        # The lock must still be held while pods are being stopped.
        assert self.fakes[-1].held() == 1
        self.kills.append((p["metadata"]["name"], grace, why))

    def changed(self) -> None:
        self.status_changes += 1

    async def start(self) -> asyncio.Task[None]:
        """The manager running, holding its lock."""
        task = asyncio.create_task(self.m.run(self.stop))
        await wait_for_async(
            "the inhibitor lock held", lambda: self.m.holds_lock, 5.0, 0.01, retry_on=()
        )
        return task


def pod(name: str, priority: int, grace: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"priority": priority, "terminationGracePeriodSeconds": grace},
    }


async def test_start_raises_inhibit_delay_through_a_drop_in_and_holds_one_lock(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, delay=5)
    task = await n.start()
    fake = n.fakes[-1]
    drop_in = Path(n.conf, "logind.conf.d", "99-kubelet.conf").read_text()
    assert drop_in == "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=15\n"
    assert fake.reloads == 1 and fake.delay == 15 and fake.held() == 1
    n.stop.set()
    await task
    assert fake.held() == 0 and fake.closed


async def test_a_large_enough_delay_is_left_alone(tmp_path: Path) -> None:
    n = Node(tmp_path, delay=60)
    task = await n.start()
    assert n.fakes[-1].reloads == 0
    assert not Path(n.conf, "logind.conf.d").exists()
    n.stop.set()
    await task


async def test_a_delay_logind_does_not_raise_disables_graceful_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = Node(tmp_path, delay=5, reload_works=False)
    mgr_checks = mgr.RELOAD_CHECKS
    mgr.RELOAD_CHECKS = 1
    try:
        with caplog.at_level(logging.ERROR):
            await asyncio.wait_for(n.m.run(n.stop), 5)
    finally:
        mgr.RELOAD_CHECKS = mgr_checks
    assert (
        "node shutdown manager was unable to update logind InhibitDelayMaxSec to 15s "
        "(ShutdownGracePeriod), current value of InhibitDelayMaxSec (5s) is less than "
        "requested ShutdownGracePeriod" in caplog.text
    )
    assert n.fakes[-1].held() == 0 and not n.m.holds_lock


async def test_shutdown_stops_pods_then_lets_go_and_a_cancel_takes_the_lock_again(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, delay=60)
    task = await n.start()
    fake = n.fakes[-1]
    assert n.m.shutdown_status() is None and n.m.admit(pod("x", 0, 1)) is None

    fake.events.put_nowait(True)
    await wait_for_async("the lock released", lambda: fake.held() == 0, 5.0, 0.01, retry_on=())
    assert n.m.shutdown_status() == "node is shutting down"
    refused = n.m.admit(pod("new", 0, 1))
    assert refused is not None
    assert (refused.reason, refused.message) == (
        "NodeShutdown", "Pod was rejected as the node is shutting down.",
    )  # fmt: skip
    # Lowest priority first, each with min(its budget, its own grace period).
    assert [(name, grace) for name, grace, _ in n.kills] == [("web", 10), ("db", 5), ("dns", 5)]
    why = n.kills[0][2]
    assert (why.reason, why.message, why.disruption) == (
        "Terminated", "Pod was terminated in response to imminent node shutdown.", True,
    )  # fmt: skip
    assert n.events[0] == ("Normal", "Shutdown", "Shutdown manager detected shutdown event")
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert 0 < parse_go_time(state["startTime"]) <= parse_go_time(state["endTime"])
    assert n.status_changes == 1

    fake.events.put_nowait(False)
    await wait_for_async("one lock held", lambda: fake.held() == 1, 5.0, 0.01, retry_on=())
    assert n.m.shutdown_status() is None and n.m.admit(pod("new", 0, 1)) is None
    assert n.events[-1] == ("Normal", "Shutdown", "Shutdown manager detected shutdown cancellation")
    # A second cancellation swaps the lock for a new one: still exactly one held.
    fake.events.put_nowait(False)
    await wait_for_async(
        "three lock requests", lambda: len(fake.pipes) == 3, 5.0, 0.01, retry_on=()
    )
    await asyncio.sleep(0.05)
    assert fake.held() == 1
    n.stop.set()
    await task
    assert fake.held() == 0


async def test_a_lost_connection_is_made_again_with_a_new_lock(tmp_path: Path) -> None:
    n = Node(tmp_path, delay=60)
    task = await n.start()
    first = n.fakes[0]
    first.events.put_nowait(None)  # the bus went away
    await wait_for_async(
        "a lock held on the new bus",
        lambda: len(n.fakes) == 2 and n.fakes[1].held() == 1,
        10,
        0.01,
        retry_on=(),
    )
    assert first.held() == 0 and first.closed
    n.stop.set()
    await task


async def test_without_a_system_bus_the_kubelet_runs_on_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def no_bus() -> FakeLogind:
        raise FileNotFoundError(2, "No such file or directory")

    m = NodeShutdownManager([GracePeriodByPriority(0, 10)], Node(tmp_path).kill, list,
                            str(tmp_path), connect=no_bus)  # fmt: skip
    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(m.run(asyncio.Event()), 2)
    assert "Failed to start node shutdown manager" in caplog.text
    assert m.shutdown_status() is None


def test_configuration_picks_the_groups_as_upstream() -> None:
    c = KubeletConfiguration()
    on = FeatureGate({})
    assert shutdown_periods(c, on) == []
    c.shutdown_grace_period, c.shutdown_grace_period_critical_pods = 30.0, 10.0
    assert shutdown_periods(c, on) == [GracePeriodByPriority(0, 20),
                                       GracePeriodByPriority(2_000_000_000, 10)]  # fmt: skip
    c.shutdown_grace_period_by_pod_priority = [
        {"priority": 100, "shutdownGracePeriodSeconds": 7},
        {"priority": 0, "shutdownGracePeriodSeconds": 3},
    ]
    assert shutdown_periods(c, on) == [GracePeriodByPriority(100, 7), GracePeriodByPriority(0, 3)]
    # With the priority gate off, the two classic groups.
    off = FeatureGate({"GracefulNodeShutdownBasedOnPodPriority": False})
    assert shutdown_periods(c, off) == [GracePeriodByPriority(0, 20),
                                        GracePeriodByPriority(2_000_000_000, 10)]  # fmt: skip
    none = NodeShutdownManager.from_config(
        c,
        FeatureGate({"GracefulNodeShutdown": False}),
        Node.kill,
        list,
        "/",
        print,
        print,  # type: ignore[arg-type]
    )
    assert none is None


def test_validation_as_upstream() -> None:
    from kubelet.apis.config.validation import validate_kubelet_configuration

    c = KubeletConfiguration()
    c.shutdown_grace_period, c.shutdown_grace_period_critical_pods = 10.0, 20.0
    c.shutdown_grace_period_by_pod_priority = [{"priority": 1, "shutdownGracePeriodSeconds": 1}]
    errs = "\n".join(validate_kubelet_configuration(c))
    assert "shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s" in errs
    assert "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod" in errs
    c = KubeletConfiguration()
    c.shutdown_grace_period = 0.5
    assert "shutdownGracePeriod 500ms must be either zero or otherwise >= 1 sec" in "\n".join(
        validate_kubelet_configuration(c)
    )
    c = KubeletConfiguration()
    c.feature_gates = {
        "GracefulNodeShutdown": False,
        "GracefulNodeShutdownBasedOnPodPriority": False,
    }
    c.shutdown_grace_period = 30.0
    c.shutdown_grace_period_by_pod_priority = [{"priority": 1, "shutdownGracePeriodSeconds": 1,
                                                "bogus": 1}]  # fmt: skip
    errs = "\n".join(validate_kubelet_configuration(c))
    assert "requires feature gate GracefulNodeShutdown" in errs
    assert "requires feature gate GracefulNodeShutdownBasedOnPodPriority" in errs
    assert 'shutdownGracePeriodByPodPriority[0]: unknown field "bogus"' in errs
