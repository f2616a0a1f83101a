"""An eviction manager with injected signals (available memory, pod usage,
clock), and the pods it ranks."""

from __future__ import annotations

from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.eviction.eviction_manager import (
    EvictionManager,
    EvictionSources,
    Observation,
    volumes_only,
)
from kubelet.testing.kubelets import EventLog

GiB = 2**30
MiB = 2**20


def pod(name: str, mem_req: str | None = None, priority: int = 0, static: bool = False) -> dict:
    res = {"requests": {"memory": mem_req}} if mem_req else {}
    ann = {"kubernetes.io/config.source": "file"} if static else {}
    return {
        "metadata": {"uid": name, "name": name, "namespace": "ns", "annotations": ann},
        "spec": {"priority": priority, "containers": [{"name": "c", "resources": res}]},
    }


class Harness:
    def __init__(self, **cfg: Any) -> None:
        self.config = KubeletConfiguration()
        for k, v in cfg.items():
            setattr(self.config, k, v)
        self.now = 1000.0
        self.available = 4 * GiB
        self.pods: list[dict] = []
        self.usage: dict[str, int] = {}
        self.evictions: list[tuple[str, int, str, str]] = []
        self.volumes: dict[str, dict[str, int]] = {}
        # pod UID -> container name -> memory working set (the eviction message)
        self.containers: dict[str, dict[str, int]] = {}
        self.recorder = EventLog()

        async def evict(p: dict, grace: int, reason: str, message: str, **_: Any) -> None:
            self.evictions.append((p["metadata"]["name"], grace, reason, message))
            self.pods.remove(p)

        sources = EvictionSources(
            lambda: list(self.pods),
            lambda: {"memory.available": Observation(self.available, 8 * GiB)},
            lambda: self.usage,
            volumes_only(lambda u: self.volumes.get(u, {})),
            container_usage=lambda p: self.containers.get(p["metadata"]["uid"], {}),
        )
        self.m = EvictionManager(
            self.config, "/", sources, evict, recorder=self.recorder, clock=lambda: self.now
        )

    @property
    def events(self) -> list[tuple[str, str, str, str]]:
        return self.recorder.events

    @property
    def annotations(self) -> list[dict[str, str]]:
        return self.recorder.annotations
