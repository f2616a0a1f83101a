"""The relist diff: raw ListPodSandbox/ListContainers bytes in, PLEG events out.

The differ keeps the previous relist itself and returns only what changed,
with the Go GenericPLEG's rules: every container and sandbox has a PLEG state
(running, exited, unknown, non-existent) and a change of state becomes an
event — running: ContainerStarted; exited: ContainerDied; unknown:
ContainerChanged; gone: ContainerRemoved, preceded by ContainerDied when it
was not already exited.

Events come out ordered by pod UID, then container ID; `changed` lists the
pod UIDs with events in the same order. IDs are unique in a real runtime; if a
response repeats one, the first occurrence counts.

`RelistDiffer` is the Rust differ unless KUBELET_IMPL=reference.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

import kubelet
from kubelet.cri.api import api_pb2 as pb
from kubelet.pleg.pleg import (
    CONTAINER_CHANGED,
    CONTAINER_DIED,
    CONTAINER_REMOVED,
    CONTAINER_STARTED,
    PodLifecycleEvent,
)

RUNNING, EXITED, UNKNOWN, NON_EXISTENT = "running", "exited", "unknown", "non-existent"
POD_UID_LABEL = "io.kubernetes.pod.uid"

_CONTAINER_STATE = {
    pb.CONTAINER_CREATED: UNKNOWN,
    pb.CONTAINER_RUNNING: RUNNING,
    pb.CONTAINER_EXITED: EXITED,
    pb.CONTAINER_UNKNOWN: UNKNOWN,
}


def _events(uid: str, cid: str, old: str, new: str) -> list[PodLifecycleEvent]:
    if old == new:
        return []
    if new == RUNNING:
        return [PodLifecycleEvent(uid, CONTAINER_STARTED, cid)]
    if new == EXITED:
        return [PodLifecycleEvent(uid, CONTAINER_DIED, cid)]
    if new == UNKNOWN:
        return [PodLifecycleEvent(uid, CONTAINER_CHANGED, cid)]
    if old == EXITED:
        return [PodLifecycleEvent(uid, CONTAINER_REMOVED, cid)]
    return [
        PodLifecycleEvent(uid, CONTAINER_DIED, cid),
        PodLifecycleEvent(uid, CONTAINER_REMOVED, cid),
    ]


class ReferenceRelistDiffer:
    def __init__(self) -> None:
        self._pods: dict[str, dict[str, str]] = {}
        self._ready_sandboxes: dict[str, int] = {}
        self.running_pods = 0
        self.running_containers = 0
        self.exited_containers = 0
        # Diffs that produced events: unchanged, the set of pod IDs is the same.
        self.changes = 0

    def diff(
        self, sandboxes: bytes, containers: bytes
    ) -> tuple[list[PodLifecycleEvent], list[str]]:
        try:
            sb = pb.ListPodSandboxResponse.FromString(sandboxes)
            cs = pb.ListContainersResponse.FromString(containers)
        except DecodeError as err:
            raise ValueError(f"undecodable relist response: {err}") from err
        pods: dict[str, dict[str, str]] = {}
        running_pods: set[str] = set()
        for s in sb.items:
            uid = s.metadata.uid
            state = RUNNING if s.state == pb.SANDBOX_READY else EXITED
            pods.setdefault(uid, {}).setdefault(s.id, state)  # a duplicate ID: first wins
            if state == RUNNING:
                running_pods.add(uid)
        running_containers = exited_containers = 0
        for c in cs.containers:
            uid = c.labels.get(POD_UID_LABEL, "")
            state = _CONTAINER_STATE.get(c.state, UNKNOWN)
            if c.id not in pods.setdefault(uid, {}):
                pods[uid][c.id] = state
            running_containers += state == RUNNING
            exited_containers += state == EXITED
        events: list[PodLifecycleEvent] = []
        changed: list[str] = []
        for uid in sorted(set(pods) | set(self._pods)):
            old = self._pods.get(uid, {})
            new = pods.get(uid, {})
            if old == new:
                continue
            before = len(events)
            for cid in sorted(set(old) | set(new)):
                events.extend(
                    _events(uid, cid, old.get(cid, NON_EXISTENT), new.get(cid, NON_EXISTENT))
                )
            if len(events) > before:
                changed.append(uid)
        self._pods = pods
        self.running_pods = len(running_pods)
        self.running_containers = running_containers
        self.exited_containers = exited_containers
        self.changes += bool(events)
        return events, changed

    def pod_ids(self) -> list[str]:
        return list(self._pods)

    def known(self, uid: str) -> bool:
        return uid in self._pods


class NativeRelistDiffer:
    """The Rust differ (kubelet_native.RelistDiffer): the same interface and results."""

    def __init__(self) -> None:
        import kubelet_native

        self._d = kubelet_native.RelistDiffer()

    def diff(
        self, sandboxes: bytes, containers: bytes
    ) -> tuple[list[PodLifecycleEvent], list[str]]:
        events, changed = self._d.diff(sandboxes, containers)
        return [PodLifecycleEvent(*e) for e in events], changed

    @property
    def running_pods(self) -> int:
        return int(self._d.running_pods)

    @property
    def running_containers(self) -> int:
        return int(self._d.running_containers)

    @property
    def exited_containers(self) -> int:
        return int(self._d.exited_containers)

    @property
    def changes(self) -> int:
        return int(self._d.changes)

    def pod_ids(self) -> list[str]:
        return list(self._d.pod_ids())

    def known(self, uid: str) -> bool:
        return bool(self._d.known(uid))


RelistDiffer: type[ReferenceRelistDiffer] | type[NativeRelistDiffer] = (
    NativeRelistDiffer if kubelet.__impl__ == "native" else ReferenceRelistDiffer
)
