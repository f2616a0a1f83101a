"""Pods stopped by priority when the node shuts down (podManager in
nodeshutdown_manager.go upstream).

shutdownGracePeriodByPodPriority gives each priority threshold a budget in
seconds; without it (or with GracefulNodeShutdownBasedOnPodPriority off),
shutdownGracePeriod and shutdownGracePeriodCriticalPods make two groups:
priority 0 with the difference, system-critical (2e9) with the critical part.
A pod belongs to the highest threshold at or below its priority (the lowest
group when it is below all of them). Groups are stopped lowest priority
first; each pod with min(budget, its terminationGracePeriodSeconds); the next
group starts once every pod of this one stopped or the budget ran out.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from kubelet.status.disruption import KubeletTermination
from kubelet.types import Pod, name, namespace
from kubelet.util.logs import level_for

log = logging.getLogger(__name__)
V1 = level_for(1)

DEFAULT_PRIORITY = 0  # scheduling.DefaultPriorityWhenNoDefaultClassExists
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000  # scheduling.SystemCriticalPriority

NODE_SHUTDOWN_REASON = "Terminated"
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
SHUTDOWN_TERMINATION = KubeletTermination(
    NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_MESSAGE, disruption=True
)

# killPodNow: stop the pod with this grace period and this final status;
# returns once its containers are stopped, raises when that takes too long.
KillPodFunc = Callable[[Pod, int, KubeletTermination], Awaitable[None]]


@dataclass(frozen=True, order=True)
class GracePeriodByPriority:
    priority: int
    shutdown_grace_period_seconds: int


@dataclass
class ShutdownGroup:
    period: GracePeriodByPriority
    pods: list[Pod] = field(default_factory=list)


def migrate_config(requested: float, critical: float) -> list[GracePeriodByPriority]:
    """The two groups of shutdownGracePeriod / shutdownGracePeriodCriticalPods (seconds)."""
    if requested == 0:
        return []
    default_part = requested - critical
    if default_part < 0:
        return []
    critical_part = requested - default_part
    if critical_part < 0:
        return []
    return [
        GracePeriodByPriority(DEFAULT_PRIORITY, int(default_part)),
        GracePeriodByPriority(SYSTEM_CRITICAL_PRIORITY, int(critical_part)),
    ]


def pod_priority(pod: Pod) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return int(p) if isinstance(p, int) and not isinstance(p, bool) else 0


def group_by_priority(
    periods: Sequence[GracePeriodByPriority], pods: list[Pod]
) -> list[ShutdownGroup]:
    """`periods` sorted by priority, lowest first; one group per period."""
    groups = [ShutdownGroup(p) for p in periods]
    if not groups:
        return groups
    keys = [p.priority for p in periods]
    for pod in pods:
        prio = pod_priority(pod)
        i = bisect.bisect_left(keys, prio)
        if i == len(groups):
            i = len(groups) - 1
        elif i > 0 and keys[i] > prio:
            i -= 1
        groups[i].pods.append(pod)
    return groups


def pod_grace(pod: Pod, budget: int) -> int:
    """The group's budget, or the pod's own terminationGracePeriodSeconds when shorter."""
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(own, int) and not isinstance(own, bool) and own <= budget:
        return own
    return budget


class PodKiller:
    """Stops the active pods group by group (killPods upstream)."""

    def __init__(self, periods: Sequence[GracePeriodByPriority], kill_pod: KillPodFunc) -> None:
        self.periods = sorted(periods)
        self.kill_pod = kill_pod
        self._tasks: set[asyncio.Task[None]] = set()

    def period_requested(self) -> int:
        """Seconds the whole shutdown may take: the sum of the group budgets."""
        return sum(p.shutdown_grace_period_seconds for p in self.periods)

    async def kill_pods(self, active: list[Pod]) -> None:
        for group in group_by_priority(self.periods, active):
            if group.pods:
                await self._kill_group(group)

    async def _kill_group(self, group: ShutdownGroup) -> None:
        budget = group.period.shutdown_grace_period_seconds
        kills = [asyncio.create_task(self._kill(p, budget)) for p in group.pods]
        for t in kills:
            # A kill that outlives the group's budget goes on in the background.
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        _done, pending = await asyncio.wait(kills, timeout=budget)
        if pending:
            log.log(
                V1,
                "Shutdown manager pod killing time out: %d of %d pods of priority %d still "
                "stopping after %ds", len(pending), len(kills), group.period.priority, budget,
            )  # fmt: skip
        else:
            log.log(
                V1,
                "Done waiting for all pods in group to terminate (priority %d, gracePeriod %ds)",
                group.period.priority, budget,
            )  # fmt: skip

    async def _kill(self, pod: Pod, budget: int) -> None:
        grace = pod_grace(pod, budget)
        log.log(V1, "Shutdown manager killing pod %s/%s with gracePeriod %ds",
                 namespace(pod), name(pod), grace)  # fmt: skip
        try:
            await self.kill_pod(pod, grace, SHUTDOWN_TERMINATION)
        except (TimeoutError, RuntimeError) as err:
            log.log(V1, "Shutdown manager failed killing pod %s/%s: %s",
                     namespace(pod), name(pod), err)  # fmt: skip
        else:
            log.log(V1, "Shutdown manager finished killing pod %s/%s", namespace(pod), name(pod))
