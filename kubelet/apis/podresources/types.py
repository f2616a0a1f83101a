"""What the pod-resources server reads (types.go upstream): small interfaces
over the pod manager and the device, CPU and memory managers. Values are the
managers' own (no protobuf): the managers do not import the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kubelet.types import Container, Pod

# resource name -> device ID -> the device's NUMA nodes (empty: no topology).
DeviceInstances = Mapping[str, Mapping[str, Sequence[int]]]


class MemoryBlock(Protocol):
    """Memory of one type ("memory", "hugepages-<size>") on NUMA nodes (the
    memory manager's state.Block)."""

    @property
    def type(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def numa_affinity(self) -> list[int] | None: ...


class PodsProvider(Protocol):
    def active_pods(self) -> list[Pod]:
        """Admitted pods that may still have running containers."""

    def all_pods(self) -> list[Pod]:
        """Every pod the pod manager knows, terminated ones included."""

    def pod_by_name(self, namespace: str, name: str) -> Pod | None: ...


class DevicesProvider(Protocol):
    def update_allocated_devices(self) -> None:
        """Release the devices of pods that are no longer active."""

    def container_devices(self, pod_uid: str, name: str) -> DeviceInstances: ...

    def allocatable_devices(self) -> DeviceInstances:
        """The healthy devices of every registered resource."""


class CPUsProvider(Protocol):
    def exclusive_cpus(self, pod_uid: str, name: str) -> frozenset[int]: ...

    def allocatable_cpus(self) -> frozenset[int]:
        """The CPUs the static policy may hand out (empty under "none")."""


class MemoryProvider(Protocol):
    def memory_blocks(self, pod_uid: str, name: str) -> Sequence[MemoryBlock]: ...

    def allocatable_memory(self) -> Sequence[MemoryBlock]:
        """Per NUMA node and memory type (empty unless the Static policy)."""


@dataclass(frozen=True)
class ClaimDevice:
    """One device a DRA driver prepared for a claim."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class DynamicClaim:
    """A prepared ResourceClaim a container uses, with its devices."""

    name: str
    namespace: str
    devices: tuple[ClaimDevice, ...]


class DynamicResourcesProvider(Protocol):
    def dynamic_resources(self, pod: Pod, container: Container) -> Sequence[DynamicClaim]:
        """The prepared claims the container names (GetDynamicResources)."""
        ...


@dataclass(frozen=True)
class Providers:
    pods: PodsProvider
    devices: DevicesProvider
    cpus: CPUsProvider
    memory: MemoryProvider
    # The DRA manager; None when DynamicResourceAllocation is off.
    dynamic: DynamicResourcesProvider | None = None
