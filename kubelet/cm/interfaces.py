"""What the resource managers need of the kubelet and the runtime (narrow, typed)."""

from __future__ import annotations

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
