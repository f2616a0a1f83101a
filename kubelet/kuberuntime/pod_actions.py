"""What to do to bring a pod to its spec (computePodActions in
kuberuntime_manager.go, computeInitContainerActions in kuberuntime_container.go).

Pure functions of the pod, its runtime status and the probe results: nothing
here calls the runtime, so a table test drives them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet.container.runtime import CREATED, EXITED, RUNNING, UNKNOWN, ContainerStatus, PodStatus
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.helpers import has_restartable_init, is_restartable_init
from kubelet.types import Container, EphemeralContainer, Pod, host_network, restart_policy

# Container ID -> why it must be restarted (a failed liveness or startup probe).
MustRestart = Callable[[str], str | None]
# (container spec, container ID) -> has its startup probe succeeded (True without one).
IsStarted = Callable[[Container, str], bool]
# (pod, container spec, its running status) -> must the container restart to
# take its allocated resources (a changed resource whose resizePolicy is
# RestartContainer)?
ResizeRestart = Callable[[Pod, Container, ContainerStatus], bool]


@dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    # The first of init_containers_to_start (kept for callers that want the spec).
    next_init_container: Container | None = None
    # Indexes into initContainers, in order (restartable ones may come with others).
    init_containers_to_start: list[int] = field(default_factory=list)
    containers_to_start: list[int] = field(default_factory=list)
    ephemeral_containers_to_start: list[int] = field(default_factory=list)
    # container ID -> (status, reason for the kill)
    containers_to_kill: dict[str, tuple[ContainerStatus, str]] = field(default_factory=dict)
    # container ID -> grace period of a kill the probe that failed sets
    # (its terminationGracePeriodSeconds), instead of the pod's.
    kill_grace: dict[str, int] = field(default_factory=dict)
    # Containers restarted to take new resources (resizePolicy RestartContainer).
    resize_restarts: set[str] = field(default_factory=set)

    def starts_anything(self) -> bool:
        return bool(
            self.create_sandbox
            or self.containers_to_start
            or self.init_containers_to_start
            or self.ephemeral_containers_to_start
        )

    def kill(self, st: ContainerStatus, why: str) -> None:
        self.containers_to_kill[st.id] = (st, why)

    def kill_whole_pod(self) -> None:
        """Nothing of the pod may run on: every container goes, none starts."""
        self.kill_pod = True
        self.init_containers_to_start = []
        self.next_init_container = None


@dataclass(frozen=True)
class Probes:
    """The probe results the decision reads."""

    must_restart: MustRestart
    is_started: IsStarted
    resize_restart: ResizeRestart = lambda _pod, _c, _st: False


def compute_pod_actions(pod: Pod, status: PodStatus, probes: Probes) -> PodActions:
    """What to do to bring the pod to its spec (computePodActions)."""
    a = PodActions()
    create, a.attempt, a.sandbox_id = sandbox_changed(pod, status)
    if create:
        return _new_sandbox_actions(pod, status, a)
    spec = pod["spec"]
    # Ephemeral containers start even while the pod initializes; never restarted.
    for i, ec in enumerate(spec.get("ephemeralContainers") or []):
        if status.find(ec["name"]) is None:
            a.ephemeral_containers_to_start.append(i)
    initialized = init_container_actions(pod, status, probes, a)
    if a.init_containers_to_start:
        a.next_init_container = spec["initContainers"][a.init_containers_to_start[0]]
    if a.kill_pod or not initialized:
        return a
    keep = _container_actions(pod, status, probes, a)
    wanted = {c["name"] for c in (*_init(pod), *spec["containers"], *_ephemeral(pod))}
    for cs in status.containers:
        if cs.state == RUNNING and cs.name not in wanted:
            a.kill(cs, "Container is not in the pod spec")
    if keep == 0 and not a.containers_to_start:
        # Nothing of the pod's own work is left: sidecars must not keep it alive.
        a.kill_whole_pod()
    return a


def sandbox_changed(pod: Pod, status: PodStatus) -> tuple[bool, int, str]:
    """(a new sandbox is needed, its attempt, the latest sandbox's ID)."""
    if not status.sandboxes:
        return True, 0, ""
    ready = [s for s in status.sandboxes if s.ready]
    latest = status.sandboxes[0]
    if len(ready) > 1 or not latest.ready:
        return True, latest.attempt + 1, latest.id
    if latest.host_network != host_network(pod):
        return True, latest.attempt + 1, latest.id
    if not host_network(pod) and not latest.ip:
        return True, latest.attempt + 1, latest.id
    return False, latest.attempt, latest.id


def _new_sandbox_actions(pod: Pod, status: PodStatus, a: PodActions) -> PodActions:
    """Whatever is left of the old sandbox goes first; the pod starts over."""
    a.kill_pod = a.create_sandbox = True
    policy = restart_policy(pod)
    containers, init = pod["spec"]["containers"], _init(pod)
    if policy == "Never" and a.attempt != 0 and status.containers:
        a.create_sandbox = False  # the pod ran already and must not run again
        return a
    to_start = [
        i
        for i, c in enumerate(containers)
        if not (policy == "OnFailure" and _succeeded(status.find(c["name"])))
    ]
    if not to_start:
        done = (
            _any_regular_created(containers, status)
            if has_restartable_init(pod)
            else _init_done(init, containers, status)
        )
        if done:
            a.create_sandbox = False
            return a
    if init:
        a.init_containers_to_start = [0]
        a.next_init_container = init[0]
        return a
    a.containers_to_start = to_start
    return a


def _container_actions(pod: Pod, status: PodStatus, probes: Probes, a: PodActions) -> int:
    """The regular containers: which start, which are killed (and why).
    Answers how many keep running as they are."""
    policy = restart_policy(pod)
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    keep = 0
    for i, c in enumerate(pod["spec"]["containers"]):
        prev = status.find(c["name"])
        if prev is None or prev.state != RUNNING:
            if _should_restart(policy, prev, deleting):
                a.containers_to_start.append(i)
                if prev is not None and prev.state == UNKNOWN:
                    # It may still run: never two instances of one container.
                    a.kill(
                        prev, f'Container is in "{UNKNOWN}" state, try killing it before restart'
                    )
            continue
        restart = policy != "Never"
        why = probes.must_restart(prev.id)
        if prev.hash and prev.hash != L.container_hash(c):
            msg = f"Container {c['name']} definition changed"
            restart = True  # a changed spec restarts whatever the policy
        elif why:
            msg = f"Container {c['name']} {why}"
            _probe_grace(pod, c, why, prev.id, a)
        elif probes.resize_restart(pod, c, prev):
            # Whatever the restart policy: the container comes back resized.
            a.resize_restarts.add(c["name"])
            a.containers_to_start.append(i)
            a.kill(prev, f"Container {c['name']} resize requires restart")
            continue
        else:
            keep += 1
            continue
        if restart:
            msg += ", will be restarted"
            a.containers_to_start.append(i)
        a.kill(prev, msg)
    return keep


def init_container_actions(pod: Pod, status: PodStatus, probes: Probes, a: PodActions) -> bool:
    """Init containers, regular and restartable (computeInitContainerActions):
    fills `a` and answers whether the pod has initialized. Walks the list from
    the end, as the runtime may have removed init containers that finished."""
    init = _init(pod)
    if not init:
        return True
    # A regular container that was created or runs: initialization happened
    # before, even if its init containers are gone from the runtime now.
    initialized = any(
        (s := status.find(c["name"])) is not None and s.state in (CREATED, RUNNING)
        for c in pod["spec"]["containers"]
    )
    walk = _InitWalk(pod, probes, a, prev_initialized=initialized)
    for i in range(len(init) - 1, -1, -1):
        st = status.find(init[i]["name"])
        if st is None:
            if walk.prev_initialized and is_restartable_init(init[i]):
                walk.start.append(i)  # a sidecar gone from the runtime comes back
            continue
        if walk.prev_initialized and not is_restartable_init(init[i]):
            continue  # after initialization only sidecars are kept running
        done = walk.step(i, st)
        if walk.failed:
            a.kill_whole_pod()
            return False
        initialized = done or initialized
        walk.prev_initialized = True
    if not walk.prev_initialized:
        walk.start.append(0)  # nothing ran yet: the first one
    a.init_containers_to_start = walk.start[::-1]
    return initialized


class _InitWalk:
    """One walk of computeInitContainerActions down the init containers."""

    def __init__(self, pod: Pod, probes: Probes, a: PodActions, prev_initialized: bool) -> None:
        self.pod, self.probes, self.a = pod, probes, a
        self.init = _init(pod)
        self.last = len(self.init) - 1
        self.on_failure = restart_policy(pod) != "Never"
        self.prev_initialized = prev_initialized
        self.start: list[int] = []  # indexes to start, collected from the end
        self.failed = False  # a regular init container failed for good

    def step(self, i: int, st: ContainerStatus) -> bool:
        """One init container that the runtime knows; answers whether the pod
        is initialized by what this one tells."""
        c = self.init[i]
        sidecar = is_restartable_init(c)
        if st.state == CREATED:
            self.start.append(i)  # created but never started: start it again
        elif st.state == RUNNING:
            return sidecar and self._sidecar_running(i, c, st)
        elif st.state == EXITED:
            if sidecar:
                self.start.append(i)
            elif _init_failed(st):
                self.failed = not self.on_failure
                self.start.append(i)
            elif i == self.last:
                return True
            else:
                self.start.append(i + 1)
        else:  # unknown: it may still run, kill it before a restart
            if not sidecar and not self.on_failure:
                self.failed = True
                return False
            self.a.kill(
                st, f'Init container is in "{st.state}" state, try killing it before restart'
            )
            self.start.append(i)
        return False

    def _sidecar_running(self, i: int, c: Container, st: ContainerStatus) -> bool:
        """A running restartable init container: does it gate the next one open,
        and must it be restarted? Answers whether the pod is now initialized."""
        a, why = self.a, self.probes.must_restart(st.id)
        if "startupProbe" in c and not self.probes.is_started(c, st.id):
            if why == "failed startup probe":
                _probe_grace(self.pod, c, why, st.id, a)
                a.kill(st, f"Init container {c['name']} failed startup probe")
                self.start.append(i)
            return False  # not started yet: the next one waits
        initialized = i == self.last
        if not initialized and not self.prev_initialized:
            self.start.append(i + 1)  # started for the first time: the next one may go
        if st.hash and st.hash != L.container_hash(c):
            a.kill(st, f"Init container {c['name']} definition changed")
            self.start.append(i)
        elif why == "failed liveness probe":
            _probe_grace(self.pod, c, why, st.id, a)
            a.kill(st, f"Init container {c['name']} failed liveness probe")
            self.start.append(i)
        elif self.probes.resize_restart(self.pod, c, st):
            a.kill(st, f"Container {c['name']} resize requires restart")
            a.resize_restarts.add(c["name"])
            self.start.append(i)
        return initialized


def _probe_grace(pod: Pod, c: Container, why: str, cid: str, a: PodActions) -> None:
    """A probe's terminationGracePeriodSeconds governs the kill it causes, unless
    the pod is being deleted (setTerminationGracePeriod upstream)."""
    if pod["metadata"].get("deletionGracePeriodSeconds") is not None:
        return
    probe = c.get("livenessProbe") if why == "failed liveness probe" else c.get("startupProbe")
    g = probe.get("terminationGracePeriodSeconds") if probe is not None else None
    if g is not None:
        a.kill_grace[cid] = int(g)


def _init(pod: Pod) -> list[Container]:
    return pod["spec"].get("initContainers") or []


def _ephemeral(pod: Pod) -> list[EphemeralContainer]:
    return pod["spec"].get("ephemeralContainers") or []


def _succeeded(st: ContainerStatus | None) -> bool:
    return st is not None and st.state == EXITED and st.exit_code == 0


def _init_failed(st: ContainerStatus) -> bool:
    if "OOMKilled" in st.reason:
        return True
    return (st.state == EXITED and st.exit_code != 0) or st.state == UNKNOWN


def _any_regular_created(containers: list[Container], status: PodStatus) -> bool:
    return any(
        (s := status.find(c["name"])) is not None and s.state in (CREATED, RUNNING, EXITED)
        for c in containers
    )


def _init_done(init: list[Container], containers: list[Container], status: PodStatus) -> bool:
    """Every (regular) init container ran to success (findNextInitContainerToRun's done)."""
    if not init:
        return True
    if any((s := status.find(c["name"])) is not None and s.state == RUNNING for c in containers):
        return True
    for c in init:
        s = status.find(c["name"])
        if s is not None and _init_failed(s):
            return False
    s = status.find(init[-1]["name"])
    return s is not None and s.state == EXITED


def _should_restart(policy: str, prev: ContainerStatus | None, deleting: bool = False) -> bool:
    if deleting:
        return False  # a pod being deleted starts nothing again
    if prev is None or prev.state in (CREATED, UNKNOWN):
        return True
    if prev.state == RUNNING:
        return False
    if policy == "Never":
        return False
    if policy == "OnFailure" and prev.exit_code == 0:
        return False
    return True
