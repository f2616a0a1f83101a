"""In-place resize of a running pod's containers (computePodResizeAction,
doPodResizeAction and validateMemoryResizeAction in kuberuntime_manager.go).

The decisions are pure functions over the allocated pod, the runtime status
and what was last actuated per container; `resize_pod` carries them out:
pod cgroup and containers in the order that keeps every parent limit at or
above its children's (limits grow on the pod first, shrink on it last),
memory before CPU.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kubelet import metrics
from kubelet.allocation.allocation_manager import resizable_containers, restarts_for
from kubelet.allocation.state import Requirements, Resources, normalize, resources_of
from kubelet.cm.cgroup_manager import CgroupError
from kubelet.container.runtime import RUNNING, ContainerStatus, PodStatus
from kubelet.core_v1 import ResourceList
from kubelet.cri import errors
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_resources
from kubelet.kuberuntime.kuberuntime_sandbox import sandbox_resources_update
from kubelet.status.resize_status import with_runtime_resources
from kubelet.types import Container, Pod, is_static, uid

log = logging.getLogger(__name__)

MEMORY, CPU = "memory", "cpu"
# A pod cgroup value with no limit (-1 as read) sorts above any limit.
UNLIMITED = 1 << 62


class Actuation(Protocol):
    """What the kubelet last set on each container (the allocation manager)."""

    def get_actuated(self, pod_uid: str, container: str) -> Requirements | None: ...

    def set_actuated(self, pod: Pod, c: Container) -> None: ...


class PodCgroups(Protocol):
    def desired(self, pod: Pod) -> dict[str, int]: ...

    def read(self, pod: Pod) -> dict[str, int]: ...

    def update(self, pod: Pod, resources: dict[str, int]) -> None: ...


def _changed(desired: Resources, current: Resources, resource: str) -> tuple[int, int] | None:
    """(desired, current) of the value that decides the order: the limit if it
    changed, else the request; None when neither did."""
    if resource == MEMORY:
        pairs = [(desired.memory_limit, current.memory_limit)]
        pairs.append((desired.memory_request, current.memory_request))
    else:
        pairs = [(desired.cpu_limit, current.cpu_limit), (desired.cpu_request, current.cpu_request)]
    return next(((d, c) for d, c in pairs if d != c), None)


def best_actuated(
    actuation: Actuation, pod: Pod, c: Container, running: ContainerStatus
) -> Requirements | None:
    """What the running container was last set to: the record, or for one
    started before the record was kept (a kubelet upgraded from a version
    without it, the checkpoint lost) what the runtime reports it runs with, as
    the pod's status shows it (the memory request, which no runtime reports,
    as allocated). None when neither knows."""
    recorded = actuation.get_actuated(uid(pod), c["name"])
    if recorded is not None or running.resources is None:
        return recorded
    return normalize(with_runtime_resources(normalize(c.get("resources")), running.resources))


def needs_restart(c: Container, actuated: Requirements | None) -> bool:
    """A resource whose allocation changed has resizePolicy RestartContainer."""
    desired, current = resources_of(c.get("resources")), resources_of(actuated)
    return any(
        _changed(desired, current, r) is not None and restarts_for(c, r) for r in (MEMORY, CPU)
    )


@dataclass(frozen=True)
class ContainerUpdate:
    container: Container  # as allocated
    cid: str
    desired: Resources
    current: Resources


@dataclass
class ResizeActions:
    """Container updates per resource, decreases before increases."""

    updates: dict[str, list[ContainerUpdate]] = field(default_factory=dict)
    # A container restarts to resize (RestartContainer): the pod cgroup
    # still follows the allocation.
    restarting: bool = False
    # Running at their allocation as the runtime reports, with no record of
    # it (started before the record was kept): recorded now, nothing to do.
    adopted: list[Container] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.updates) or self.restarting


def compute_resize(
    pod: Pod, status: PodStatus, actuation: Actuation, killed: set[str],
    resize_restarts: bool = False,
) -> ResizeActions:  # fmt: skip
    """computePodResizeAction over the running resizable containers of the
    (allocated) pod. `killed` names those the pod actions kill (they start
    again sized by their allocation); when some restart for their resize
    (`resize_restarts`) the pod cgroup still follows the allocation."""
    out = ResizeActions(restarting=resize_restarts)
    if is_static(pod):
        return out
    for c in resizable_containers(pod):
        st = status.find(c["name"])
        if st is None or st.state != RUNNING or c["name"] in killed:
            continue
        desired = resources_of(c.get("resources"))
        current = resources_of(best_actuated(actuation, pod, c, st))
        if desired == current:
            if actuation.get_actuated(uid(pod), c["name"]) is None:
                out.adopted.append(c)
            continue
        upd = ContainerUpdate(c, st.id, desired, current)
        for r in (MEMORY, CPU):
            pair = _changed(desired, current, r)
            if pair is None:
                continue
            queue = out.updates.setdefault(r, [])
            if pair[0] < pair[1]:
                queue.insert(0, upd)
            else:
                queue.append(upd)
    return out


def order_steps(cur_limit: int, new_limit: int, cur_request: int, new_request: int) -> list[str]:
    """The order of one resource's resize: "limit" and "request" of the pod
    cgroup around "containers" (requests stay at or below limits)."""
    steps = []
    if new_limit > cur_limit:
        steps.append("limit")
    if new_request > cur_request:
        steps.append("request")
    steps.append("containers")
    if new_request < cur_request:
        steps.append("request")
    if new_limit < cur_limit:
        steps.append("limit")
    return steps


def memory_decrease_errors(
    pod_limit: tuple[int, int] | None,
    pod_usage: int | None,
    updates: list[ContainerUpdate],
    usage: Mapping[str, int | None],
) -> list[str]:
    """validateMemoryResizeAction: no memory limit set below what is in use.
    pod_limit is (current, desired), current -1 for none."""
    errs = []
    if (
        pod_limit is not None
        and pod_limit[1] > 0
        and (pod_limit[0] < 0 or pod_limit[1] < pod_limit[0])
    ):
        if pod_usage is None:
            errs.append("missing pod memory usage")
        elif pod_usage >= pod_limit[1]:
            errs.append(
                f"attempting to set pod memory limit ({pod_limit[1]}) below current usage ({pod_usage})"
            )
    for u in updates:
        want, have = u.desired.memory_limit, u.current.memory_limit
        if not want or (have and want >= have):
            continue
        name = u.container["name"]
        used = usage.get(name)
        if used is None:
            errs.append(f'missing container "{name}" memory usage')
        elif used >= want:
            errs.append(
                f'attempting to set container "{name}" memory limit ({want}) below current usage ({used})'
            )
    return errs


def aggregate(errs: list[str]) -> str:
    """utilerrors.NewAggregate's text."""
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"


def staged(u: ContainerUpdate, resource: str) -> Container:
    """The container as set during one resource's phase: the memory phase keeps
    the CPU values last set, the CPU phase comes after memory is done."""
    c = copy.deepcopy(u.container)
    cpu = u.current if resource == MEMORY else u.desired
    mem = u.desired
    lim: ResourceList = {}
    req: ResourceList = {}
    if cpu.cpu_limit:
        lim[CPU] = f"{cpu.cpu_limit}m"
    if cpu.cpu_request:
        req[CPU] = f"{cpu.cpu_request}m"
    if mem.memory_limit:
        lim[MEMORY] = str(mem.memory_limit)
    if mem.memory_request:
        req[MEMORY] = str(mem.memory_request)
    c["resources"] = {"limits": lim, "requests": req}
    return c


class ResizeError(Exception):
    """The resize could not be (fully) actuated; its text goes into the
    PodResizeInProgress condition (reason Error)."""


# The pod cgroup's settings the runtime is told of after each change.
SANDBOX_KEYS = ("cpu_shares", "cpu_quota", "cpu_period", "memory_limit")


@dataclass
class _Run:
    """One resize of one pod: what its cgroup holds as the steps go."""

    pod: Pod
    sandbox_id: str
    cgroup: dict[str, int]


@dataclass
class PodResizer:
    """doPodResizeAction for one pod."""

    runtime: RuntimeService
    node: NodeSettings
    cgroups: PodCgroups | None
    actuation: Actuation
    # UNIMPLEMENTED from UpdatePodSandboxResources is said once at info level.
    sandbox_update_unimplemented_logged: bool = False

    async def resize(self, pod: Pod, actions: ResizeActions, sandbox_id: str = "") -> None:
        """Raises ResizeError; containers done before an error stay done.
        kubelet_pod_resize_duration_milliseconds observes every attempt."""
        start, success = time.monotonic(), False
        try:
            await self._resize(pod, actions, sandbox_id)
            success = True
        finally:
            elapsed = int((time.monotonic() - start) * 1000)
            metrics.POD_RESIZE_DURATION.labels(str(success).lower()).observe(elapsed)

    async def _resize(self, pod: Pod, actions: ResizeActions, sandbox_id: str) -> None:
        loop = asyncio.get_running_loop()
        desired: dict[str, int] = {}
        current: dict[str, int] = {}
        if self.cgroups is not None:
            desired = self.cgroups.desired(pod)
            try:
                current = await loop.run_in_executor(None, self.cgroups.read, pod)
            except OSError as err:
                raise ResizeError(
                    f"unable to get pod cgroup config for pod {pod_ref(pod)}: {err}"
                ) from None
        # As upstream's currentPodResources: the cgroup's values, else the desired ones.
        view = {k: v for src in (desired, current) for k, v in src.items() if k in SANDBOX_KEYS}
        run = _Run(pod, sandbox_id, view)
        mem_updates = actions.updates.get(MEMORY, [])
        if mem_updates or actions.restarting:
            await self._check_memory(pod, current, desired, mem_updates)
            cur = current.get("memory_limit", -1)
            new = desired.get("memory_limit", cur)
            await self._phase(run, MEMORY, mem_updates, (_lim(cur), _lim(new), 0, 0),
                              {"memory_limit": new} if new > 0 else {}, {})  # fmt: skip
        cpu_updates = actions.updates.get(CPU, [])
        if cpu_updates or actions.restarting:
            cur_q = current.get("cpu_quota", -1)
            new_q = desired.get("cpu_quota", cur_q)
            period = desired.get("cpu_period", current.get("cpu_period", 100000))
            shares = desired.get("cpu_shares", current.get("cpu_shares", 2))
            limit = {"cpu_quota": new_q, "cpu_period": period} if new_q != cur_q else {}
            order = (_lim(cur_q), _lim(new_q), current.get("cpu_shares", shares), shares)
            await self._phase(run, CPU, cpu_updates, order, limit, {"cpu_shares": shares})

    async def _phase(
        self, run: _Run, resource: str, updates: list[ContainerUpdate],
        order: tuple[int, int, int, int], limit: dict[str, int], request: dict[str, int],
    ) -> None:  # fmt: skip
        for step in order_steps(*order):
            if step == "containers":
                for u in updates:
                    await self._update_container(run.pod, u, resource)
            elif self.cgroups is not None:
                values = limit if step == "limit" else request
                if values:
                    await self._set_pod_cgroup(run, values)

    async def _set_pod_cgroup(self, run: _Run, values: dict[str, int]) -> None:
        assert self.cgroups is not None
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.cgroups.update, run.pod, values
            )
        except (OSError, CgroupError) as err:
            raise ResizeError(str(err)) from None
        run.cgroup.update(values)
        await self._update_sandbox(run)

    async def _update_sandbox(self, run: _Run) -> None:
        """UpdatePodSandboxResources after each pod cgroup change, best effort
        as upstream: a runtime without it (containerd 1.6 and 2.0) or failing
        it is logged and the resize goes on."""
        pod = run.pod
        if not run.sandbox_id:
            log.debug("Pod %s: no sandbox to tell of its new resources", pod_ref(pod))
            return
        overhead, resources = sandbox_resources_update(pod, run.cgroup)
        try:
            await self.runtime.update_pod_sandbox_resources(run.sandbox_id, overhead, resources)
        except errors.UnimplementedError:
            level = logging.DEBUG if self.sandbox_update_unimplemented_logged else logging.INFO
            self.sandbox_update_unimplemented_logged = True
            log.log(level, "The runtime does not implement UpdatePodSandboxResources "
                    "(best effort; the resize goes on), pod %s sandbox %s",
                    pod_ref(pod), run.sandbox_id)  # fmt: skip
        except errors.CRIError as err:
            log.error("Failed to notify runtime for UpdatePodSandboxResources, pod %s: %s",
                      pod_ref(pod), err)  # fmt: skip

    async def _update_container(self, pod: Pod, u: ContainerUpdate, resource: str) -> None:
        c = staged(u, resource)
        res = container_resources(pod, c, self.node)
        try:
            await self.runtime.update_container_resources(u.cid, res)
        except errors.CRIError as err:
            raise ResizeError(
                f'container "{u.container["name"]}" updateContainerResources failed: {err}'
            ) from None
        if resource == CPU or not _changed(u.desired, u.current, CPU):
            self.actuation.set_actuated(pod, u.container)

    async def _check_memory(
        self,
        pod: Pod,
        current: dict[str, int],
        desired: dict[str, int],
        updates: list[ContainerUpdate],
    ) -> None:
        pod_limit = None
        if "memory_limit" in desired and self.cgroups is not None:
            pod_limit = (current.get("memory_limit", -1), desired["memory_limit"])
        usage: dict[str, int | None] = {}
        for u in updates:
            if u.desired.memory_limit and (
                not u.current.memory_limit or u.desired.memory_limit < u.current.memory_limit
            ):
                usage[u.container["name"]] = await self._usage(u.cid)
        errs = memory_decrease_errors(pod_limit, current.get("memory_usage"), updates, usage)
        if errs:
            raise ResizeError("cannot decrease memory limits: " + aggregate(errs))

    async def _usage(self, cid: str) -> int | None:
        try:
            st = await self.runtime.container_stats(cid)
        except errors.CRIError:
            return None
        if not st.HasField("memory") or not st.memory.HasField("usage_bytes"):
            return None
        return int(st.memory.usage_bytes.value)


def _lim(v: int) -> int:
    return UNLIMITED if v < 0 else v


def pod_ref(pod: Pod) -> str:
    md = pod["metadata"]
    return f'"{md.get("name", "")}_{md.get("namespace", "")}({md.get("uid", "")})"'
