"""What the kubelet knows of a pod's containers in the runtime (kubecontainer.PodStatus)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kubelet.cri.api import api_pb2 as pb
from kubelet.types import Container, Pod

CREATED, RUNNING, EXITED, UNKNOWN = "created", "running", "exited", "unknown"


# The runtime's view of every pod is held at once (the pod cache): slots keep
# each of these a fraction of a dict-backed object.
@dataclass(frozen=True, slots=True)
class ContainerResources:
    """What the runtime reports a container runs with (0: not set)."""

    cpu_limit_m: int = 0
    cpu_request_m: int = 0
    memory_limit: int = 0

    @classmethod
    def from_cri(cls, r: pb.LinuxContainerResources) -> ContainerResources | None:
        """toKubeContainerResources: quota and shares back to milli-CPU."""
        limit = r.cpu_quota * 1000 // r.cpu_period if r.cpu_period > 0 and r.cpu_quota > 0 else 0
        # sharesToMilliCPU: below the minimum (2) reads as no request.
        request = -(-r.cpu_shares * 1000 // 1024) if r.cpu_shares >= 2 else 0
        mem = max(r.memory_limit_in_bytes, 0)
        return cls(limit, request, mem) if limit or request or mem else None


@dataclass(frozen=True, slots=True)
class LinuxUser:
    """The identity a container's process runs as, as the runtime reports it."""

    uid: int
    gid: int
    supplemental_groups: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ContainerUser:
    linux: LinuxUser | None  # None: the runtime reported a user without its Linux part


@dataclass(slots=True)
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
    resources: ContainerResources | None = None
    user: ContainerUser | None = None  # SupplementalGroupsPolicy on and reported

    @property
    def container_id(self) -> str:
        return f"{self.runtime}://{self.id}"


@dataclass(slots=True)
class SandboxStatus:
    id: str
    ready: bool
    created_at: int
    attempt: int
    ip: str = ""
    host_network: bool = False


@dataclass(slots=True)
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


# --------------------------------------------------------------------------
# The seam between the runtime manager and the rest of the kubelet
# (kubecontainer.RuntimeHelper upstream): what a container needs from the
# pod's world (environment, mounts, DNS, hostname) is asked for here, so the
# runtime manager never reaches into volumes, config maps or services itself.


class ContainerConfigError(Exception):
    """A container cannot be configured yet (a missing configMap key, a volume
    not mounted, ...): the container waits with CreateContainerConfigError and
    this message, and the pod is retried."""

    reason = "CreateContainerConfigError"


@dataclass
class Mount:
    """One bind mount into a container (CRI Mount)."""

    container_path: str
    host_path: str
    read_only: bool = False
    selinux_relabel: bool = False
    # "" (private), "HostToContainer" or "Bidirectional"
    propagation: str = ""
    # recursiveReadOnly resolved: submounts read-only too (RecursiveReadOnlyMounts)
    recursive_read_only: bool = False


@dataclass(frozen=True)
class Device:
    """One device node given to a container (CRI Device): a raw block volume."""

    container_path: str
    host_path: str
    permissions: str  # cgroup device access: "mrw", or "r" for a read-only volume


@dataclass
class RunContainerOptions:
    """GenerateRunContainerOptions' answer for one container."""

    envs: list[tuple[str, str]] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    # Host file the runtime mounts at terminationMessagePath ("" for none).
    termination_message_host_path: str = ""
    hostname: str = ""


class RuntimeHelper(Protocol):
    """What kuberuntime asks the kubelet for while it builds sandbox and
    container configs. Implemented in kubelet/kubelet_pods.py."""

    async def generate_run_container_options(
        self, pod: Pod, container: Container, pod_ips: list[str]
    ) -> RunContainerOptions:
        """Raises ContainerConfigError when the container cannot start yet."""
        ...

    def get_pod_dns(self, pod: Pod) -> DNSSettings: ...

    def generate_pod_hostname_and_domain(self, pod: Pod) -> tuple[str, str]: ...

    def get_pod_dir(self, pod_uid: str) -> str: ...


@dataclass
class DNSSettings:
    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
