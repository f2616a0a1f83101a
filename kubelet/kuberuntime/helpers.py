"""What the runtime manager's parts share (kuberuntime/helpers.go upstream):
what a sync tells (events, waiting reasons, its result) and small readers of
the pod spec."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kubelet.container.runtime import CREATED, EXITED, RUNNING, UNKNOWN
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.events import Recorder
from kubelet.types import (
    Container,
    Pod,
    all_containers,
    container_field_path,
    grace_period,
    name,
    namespace,
    object_ref,
    uid,
)

MIN_GRACE_SECONDS = 2  # minimumGracePeriodInSeconds

# pod UID -> container name -> (reason, message) while it is not running: what
# the status manager shows as the container's waiting state.
Waiting = dict[str, dict[str, tuple[str, str]]]

_STATE = {
    pb.CONTAINER_CREATED: CREATED,
    pb.CONTAINER_RUNNING: RUNNING,
    pb.CONTAINER_EXITED: EXITED,
    pb.CONTAINER_UNKNOWN: UNKNOWN,
}


class RuntimeIdentity(Protocol):
    """The runtime's name in container IDs (<name>://<id>), as its Version
    answer gives it (the kubelet's RuntimeState, once the runtime is up)."""

    def runtime_name(self) -> str: ...


class UnnamedRuntime:
    """A runtime that has not said its name: IDs read cri://<id>."""

    def runtime_name(self) -> str:
        return "cri"


def container_state(state: pb.ContainerState) -> str:
    """The CRI container state as the kubelet names it (toKubeContainerState)."""
    return _STATE.get(state, UNKNOWN)


class PodReporter:
    """What the runtime manager tells about pods: events (the recorder may be
    None: no event sink) and the waiting reason of each container that does
    not run. One per runtime manager, shared by its parts."""

    def __init__(self, recorder: Recorder | None) -> None:
        self.recorder = recorder
        self.waiting: Waiting = {}

    def event(
        self, pod: Pod, etype: str, reason: str, msg: str, container: str | None = None
    ) -> None:
        # Container events point at the container, as upstream's container refs do.
        if self.recorder is not None:
            path = container_field_path(pod, container) if container else None
            self.recorder.event(object_ref(pod, path), etype, reason, msg)

    def waiting_of(self, pod: Pod) -> dict[str, tuple[str, str]]:
        return self.waiting.setdefault(uid(pod), {})

    def container_failed(
        self, pod: Pod, cname: str, reason: str, msg: str, told: str | None = None
    ) -> str:
        """The container could not start: its waiting reason, and startContainer's
        Warning event (told: what the event says instead of msg). Answers msg."""
        self.waiting_of(pod)[cname] = (reason, msg)
        self.event(pod, "Warning", "Failed", f"Error: {told or msg}", cname)
        return msg


@dataclass
class SyncResult:
    """What one sync of a pod learned. Each sync has its own: many pods sync
    concurrently through one runtime manager."""

    errors: list[str] = field(default_factory=list)
    sandbox_created: bool = False
    # Seconds until a back-off that blocked this sync runs out (None: no back-off).
    retry_after: float | None = None
    # An in-place resize was carried out (the pod's status is due again), and
    # why it failed if it did (the PodResizeInProgress condition's Error).
    resized: bool = False
    resize_error: str = ""

    def backoff_until(self, seconds: float) -> None:
        self.retry_after = seconds if self.retry_after is None else min(self.retry_after, seconds)

    @property
    def ok(self) -> bool:
        return not self.errors


def format_pod(pod: Pod) -> str:
    return f"{name(pod)}_{namespace(pod)}({uid(pod)})"


def find_container_spec(pod: Pod, cname: str) -> Container | None:
    return next((c for c in all_containers(pod) if c.get("name") == cname), None)


def pod_grace_period(pod: Pod) -> int:
    """deletionGracePeriodSeconds when the pod is being deleted, else the spec's."""
    g = pod["metadata"].get("deletionGracePeriodSeconds")
    return int(g) if g is not None else grace_period(pod)


def is_restartable_init(c: Container) -> bool:
    """A sidecar: an init container with restartPolicy Always."""
    return c.get("restartPolicy") == "Always"


def has_restartable_init(pod: Pod) -> bool:
    return any(is_restartable_init(c) for c in pod["spec"].get("initContainers") or [])


async def each_ignoring_gone(call: Callable[[str], Awaitable[object]], ids: Iterable[str]) -> None:
    """call on each ID in turn; an object the runtime no longer has is what was wanted."""
    for i in ids:
        try:
            await call(i)
        except errors.NotFoundError:
            pass
