"""The pod-resources API's providers as fakes: two pods (one running with a
plain init container and a sidecar, one done) and the devices, exclusive CPUs
and memory blocks they hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from kubelet.apis.podresources.types import Providers
from kubelet.cm.memorymanager.state import Block
from kubelet.types import Pod, name, namespace


def pod(
    pod_name: str, pod_uid: str, containers: list[str], inits: Sequence[tuple[str, bool]] = ()
) -> Pod:
    return cast(Pod, {
        "metadata": {"name": pod_name, "namespace": "ns", "uid": pod_uid},
        "spec": {
            "initContainers": [
                {"name": n, **({"restartPolicy": "Always"} if sidecar else {})} for n, sidecar in inits
            ],
            "containers": [{"name": n} for n in containers],
        },
    })  # fmt: skip


RUNNING = pod("web", "u1", ["app"], inits=[("setup", False), ("proxy", True)])


DONE = pod("job", "u2", ["work"])


@dataclass
class FakePods:
    active: list[Pod]
    known: list[Pod]

    def active_pods(self) -> list[Pod]:
        return list(self.active)

    def all_pods(self) -> list[Pod]:
        return list(self.known)

    def pod_by_name(self, pod_namespace: str, pod_name: str) -> Pod | None:
        for p in self.known:
            if (namespace(p), name(p)) == (pod_namespace, pod_name):
                return p
        return None


@dataclass
class FakeDevices:
    held: dict[tuple[str, str], dict[str, dict[str, list[int]]]]
    healthy: dict[str, dict[str, list[int]]]
    calls: list[str] = field(default_factory=list)

    def update_allocated_devices(self) -> None:
        self.calls.append("update")

    def container_devices(
        self, pod_uid: str, name: str
    ) -> Mapping[str, Mapping[str, Sequence[int]]]:
        self.calls.append(f"devices {pod_uid}/{name}")
        return self.held.get((pod_uid, name), {})

    def allocatable_devices(self) -> Mapping[str, Mapping[str, Sequence[int]]]:
        return self.healthy


@dataclass
class FakeCPUs:
    held: dict[tuple[str, str], frozenset[int]]
    allocatable: frozenset[int]

    def exclusive_cpus(self, pod_uid: str, name: str) -> frozenset[int]:
        return self.held.get((pod_uid, name), frozenset())

    def allocatable_cpus(self) -> frozenset[int]:
        return self.allocatable


@dataclass
class FakeMemory:
    held: dict[tuple[str, str], list[Block]]
    allocatable: list[Block]

    def memory_blocks(self, pod_uid: str, name: str) -> list[Block]:
        return self.held.get((pod_uid, name), [])

    def allocatable_memory(self) -> list[Block]:
        return self.allocatable


def providers() -> Providers:
    devices = FakeDevices(
        held={
            ("u1", "app"): {"example.com/gpu": {"gpu-1": [1], "gpu-0": [0, 1]}},
            ("u1", "proxy"): {"example.com/nic": {"nic-0": []}},
            ("u1", "setup"): {"example.com/nic": {"nic-9": []}},
            ("u2", "work"): {"example.com/gpu": {"gpu-2": [0]}},
        },
        healthy={"example.com/gpu": {"gpu-0": [0, 1], "gpu-1": [1]}, "example.com/nic": {"nic-0": []}},
    )  # fmt: skip
    cpus = FakeCPUs({("u1", "app"): frozenset({3, 2}), ("u1", "setup"): frozenset({1})},
                    frozenset({3, 1, 2}))  # fmt: skip
    memory = FakeMemory(
        {("u1", "app"): [Block([1], "memory", 64 << 20), Block(None, "hugepages-2Mi", 2 << 20)]},
        [Block([0], "memory", 7 << 30), Block([1], "memory", 8 << 30)],
    )
    return Providers(FakePods([RUNNING], [RUNNING, DONE]), devices, cpus, memory)
