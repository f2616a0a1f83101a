"""What the kubelet knows of a pod's containers in the runtime (kubecontainer.PodStatus)."""

from __future__ import annotations

from dataclasses import dataclass, field

CREATED, RUNNING, EXITED, UNKNOWN = "created", "running", "exited", "unknown"


@dataclass
class ContainerStatus:
    id: str
    name: str
    state: str
    created_at: int = 0  # ns
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    image: str = ""
    image_ref: str = ""
    image_id: str = ""
    hash: str = ""
    restart_count: int = 0
    reason: str = ""
    message: str = ""
    runtime: str = "cri"

    @property
    def container_id(self) -> str:
        return f"{self.runtime}://{self.id}"


@dataclass
class SandboxStatus:
    id: str
    ready: bool
    created_at: int
    attempt: int
    ip: str = ""
    host_network: bool = False


@dataclass
class PodStatus:
    id: str
    name: str = ""
    namespace: str = ""
    ips: list[str] = field(default_factory=list)
    sandboxes: list[SandboxStatus] = field(default_factory=list)  # newest first
    containers: list[ContainerStatus] = field(default_factory=list)  # newest first
    timestamp: float = 0.0

    def find(self, name: str) -> ContainerStatus | None:
        """The most recent status of the container with this name."""
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def all_named(self, name: str) -> list[ContainerStatus]:
        return [c for c in self.containers if c.name == name]

    def running(self) -> list[ContainerStatus]:
        return [c for c in self.containers if c.state == RUNNING]


def empty_status(uid: str) -> PodStatus:
    return PodStatus(id=uid)
