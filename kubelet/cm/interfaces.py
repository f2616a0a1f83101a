"""What the container manager's parts need of the kubelet and the runtime (narrow, typed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kubelet.cm.devicemanager.pod_devices import DeviceRunOptions
from kubelet.cri.api import api_pb2 as pb
from kubelet.types import Container, Pod


class ContainerManagerError(Exception):
    """The node or the resource managers cannot be set up as configured (a
    setting, a host check, a state file): the kubelet must not start."""


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
        if pod is None:
            out.append((pod_uid, name))
            continue
        spec = pod["spec"]
        names = {
            c["name"]
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        }
        if name not in names:
            out.append((pod_uid, name))
    return out


class CPUPinning(NamedTuple):
    """A container's CPU and memory placement for its CRI config."""

    cpuset_cpus: str = ""  # "" leaves it unset
    cpuset_mems: str = ""
    # It has CPUs of its own: no CFS quota (DisableCPUQuotaWithExclusiveCPUs).
    unlimited_quota: bool = False


class ContainerResourceManager(Protocol):
    """What the runtime manager asks when it creates and removes containers."""

    def container_cpuset(self, pod: Pod, container: Container) -> CPUPinning: ...

    def pod_has_exclusive_cpus(self, pod: Pod) -> bool:
        """True when the pod's CFS quota is lifted for its pinned CPUs."""

    async def device_options(self, pod: Pod, container: Container) -> DeviceRunOptions:
        """The container's devices for its CRI config; AllocationError when a
        device plugin cannot give them, DRAError when a claim is not prepared."""

    async def prepare_dynamic_resources(self, pod: Pod) -> None:
        """PrepareDynamicResources before the sandbox; DRAError when it fails."""

    def container_created(self, pod: Pod, container: Container, container_id: str) -> None: ...

    def remove_container(self, container_id: str) -> None: ...
