"""Priority groups of graceful node shutdown: the two-group migration of
shutdownGracePeriod / shutdownGracePeriodCriticalPods, which group a pod falls
in, its grace period, and that groups are stopped lowest first, each after the
previous one stopped or ran out of its budget."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubelet.nodeshutdown.groups import (
    DEFAULT_PRIORITY,
    NODE_SHUTDOWN_MESSAGE,
    SYSTEM_CRITICAL_PRIORITY,
    GracePeriodByPriority,
    PodKiller,
    group_by_priority,
    migrate_config,
    pod_grace,
)
from kubelet.status.disruption import KubeletTermination


def pod(name: str, priority: int | None = None, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": spec}


def names(groups: Any) -> list[list[str]]:
    return [[p["metadata"]["name"] for p in g.pods] for g in groups]


def test_migration_makes_the_default_and_the_critical_group() -> None:
    assert migrate_config(300, 120) == [
        GracePeriodByPriority(DEFAULT_PRIORITY, 180),
        GracePeriodByPriority(SYSTEM_CRITICAL_PRIORITY, 120),
    ]
    assert migrate_config(100, 0) == [
        GracePeriodByPriority(0, 100),
        GracePeriodByPriority(SYSTEM_CRITICAL_PRIORITY, 0),
    ]
    assert migrate_config(0, 0) == []
    assert migrate_config(1, 100) == []  # critical part larger than the whole


def test_pods_go_to_the_highest_threshold_at_or_below_their_priority() -> None:
    periods = [GracePeriodByPriority(p, 10 * p) for p in (1, 2, 3, 4)]
    pods = [pod(f"pod-{p}", p) for p in range(6)]
    # 0 is below every threshold: the lowest group; 5 above all: the highest.
    assert names(group_by_priority(periods, pods)) == [
        ["pod-0", "pod-1"], ["pod-2"], ["pod-3"], ["pod-4", "pod-5"],
    ]  # fmt: skip


def test_migrated_groups_put_user_priorities_with_the_default() -> None:
    pods = [pod("normal", 0), pod("highest-user", 1_000_000_000), pod("critical", 2_000_000_000),
            pod("no-priority")]  # fmt: skip
    assert names(group_by_priority(migrate_config(300, 120), pods)) == [
        ["normal", "highest-user", "no-priority"], ["critical"],
    ]  # fmt: skip


@given(
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=6, unique=True),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20),
)
def test_grouping_against_a_linear_scan(thresholds: list[int], priorities: list[int]) -> None:
    periods = sorted(GracePeriodByPriority(t, 1) for t in thresholds)
    pods = [pod(f"p{i}", p) for i, p in enumerate(priorities)]
    groups = group_by_priority(periods, pods)
    for i, p in enumerate(priorities):
        at_or_below = [k for k, g in enumerate(periods) if g.priority <= p]
        want = at_or_below[-1] if at_or_below else 0
        assert f"p{i}" in names(groups)[want]


def test_a_pod_keeps_its_own_grace_period_when_it_is_shorter() -> None:
    assert pod_grace(pod("a", grace=5), 20) == 5
    assert pod_grace(pod("b", grace=120), 20) == 20
    assert pod_grace(pod("c"), 20) == 20  # unset: the budget
    assert pod_grace(pod("d", grace=0), 20) == 0


async def test_groups_are_stopped_lowest_priority_first_and_one_after_the_other() -> None:
    log: list[tuple[str, str, int]] = []
    gate: dict[str, asyncio.Event] = {}

    async def kill(p: dict[str, Any], grace: int, why: KubeletTermination) -> None:
        n = p["metadata"]["name"]
        assert why.message == NODE_SHUTDOWN_MESSAGE and why.reason == "Terminated"
        log.append(("start", n, grace))
        gate[n] = asyncio.Event()
        await gate[n].wait()
        log.append(("stopped", n, grace))

    killer = PodKiller([GracePeriodByPriority(100, 30), GracePeriodByPriority(0, 20)], kill)
    assert killer.period_requested() == 50
    task = asyncio.create_task(killer.kill_pods([pod("high", 100, grace=3), pod("low-a", 0),
                                                 pod("low-b", 5, grace=90)]))  # fmt: skip
    while len(gate) < 2:  # noqa: ASYNC110
        await asyncio.sleep(0)
    # The low group is being stopped; the high one waits for it.
    assert sorted(n for _, n, _ in log) == ["low-a", "low-b"]
    gate["low-a"].set()
    await asyncio.sleep(0.01)
    assert "high" not in gate
    gate["low-b"].set()
    while "high" not in gate:  # noqa: ASYNC110
        await asyncio.sleep(0)
    gate["high"].set()
    await task
    assert ("start", "low-a", 20) in log and ("start", "low-b", 20) in log
    assert log[-2:] == [("start", "high", 3), ("stopped", "high", 3)]


async def test_a_group_that_does_not_stop_in_time_does_not_hold_up_the_next() -> None:
    started: list[str] = []
    never = asyncio.Event()

    async def kill(p: dict[str, Any], grace: int, why: KubeletTermination) -> None:
        started.append(p["metadata"]["name"])
        if p["metadata"]["name"] == "stuck":
            await never.wait()

    killer = PodKiller([GracePeriodByPriority(0, 0), GracePeriodByPriority(10, 5)], kill)
    # Budget 0 for the stuck pod's group: the next group starts right away.
    await asyncio.wait_for(killer.kill_pods([pod("stuck", 0), pod("next", 10)]), 4)
    assert started == ["stuck", "next"]
    never.set()


async def test_empty_groups_are_skipped_and_kill_errors_do_not_stop_the_rest() -> None:
    started: list[str] = []

    async def kill(p: dict[str, Any], grace: int, why: KubeletTermination) -> None:
        started.append(p["metadata"]["name"])
        raise TimeoutError("timeout waiting to kill pod")

    killer = PodKiller([GracePeriodByPriority(0, 5), GracePeriodByPriority(50, 5),
                        GracePeriodByPriority(100, 5)], kill)  # fmt: skip
    await asyncio.wait_for(killer.kill_pods([pod("a", 0), pod("b", 100)]), 2)
    assert started == ["a", "b"]
