"""What the resource managers need of the kubelet and the runtime (narrow, typed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from kubelet.cri.api import api_pb2 as pb
from kubelet.types import Pod


@dataclass(frozen=True)
class RunningContainer:
    name: str
    container_id: str


class PodLookup(Protocol):
    """The active pods (admitted, not rejected, not known to be stopped; the
    kubelet's GetActivePods) and the running containers of one of them."""

    def active_pod(self, pod_uid: str) -> Pod | None: ...

    def active_pods(self) -> list[Pod]: ...

    def running_containers(self, pod_uid: str) -> list[RunningContainer]: ...


class ContainerUpdater(Protocol):
    async def update_container_resources(
        self, container_id: str, linux: pb.LinuxContainerResources
    ) -> None: ...


def stale_refs(refs: Iterable[tuple[str, str]], pods: PodLookup) -> list[tuple[str, str]]:
    """The (pod UID, container name) pairs no active pod has any more
    (removeStaleState): one lookup per pod that holds something, never a
    walk over all pods."""
    out = []
    for pod_uid, name in sorted(set(refs)):
        pod = pods.active_pod(pod_uid)
        spec = (pod or {}).get("spec") or {}
        names = {c.get("name") for k in ("initContainers", "containers") for c in spec.get(k) or []}
        if pod is None or name not in names:
            out.append((pod_uid, name))
    return out
