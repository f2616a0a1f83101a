"""What the kubelet's servers read of the node (HostInterface in server.go), so
they do not depend on how the Kubelet is put together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime.logs import LogOptions, LogTargetError

HealthCheck = Callable[[], str | None]


class SummaryProvider(Protocol):
    def summary(self) -> dict[str, Any]:
        """/stats/summary; blocking (reads cgroup files): called off the event loop."""
        ...


class NodeView(Protocol):
    """What the servers read of the node (the HostInterface upstream)."""

    @property
    def stats(self) -> SummaryProvider | None: ...

    @property
    def resource_registry(self) -> CollectorRegistry | None: ...

    @property
    def cadvisor_registry(self) -> CollectorRegistry | None:
        """/metrics/cadvisor: container_* series from the stats provider's collection."""
        ...

    def get_pods(self) -> list[dict[str, Any]]: ...

    def healthz_checks(self) -> dict[str, HealthCheck]: ...

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        """Stream a container's log; raises LogTargetError before the first byte."""
        ...

    def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
        """The pod as the kubelet runs it (for a static pod: not the mirror pod)."""
        ...

    @property
    def runtime_service(self) -> RuntimeService | None:
        """The CRI runtime: exec, attach, port-forward, run and /runningpods ask it."""
        ...

    @property
    def streaming_idle_timeout(self) -> float:
        """streamingConnectionIdleTimeout, seconds (0: none)."""
        ...


class NoPods:
    """What the servers see before the pod machinery exists (and in tests)."""

    stats: SummaryProvider | None = None
    resource_registry: CollectorRegistry | None = None
    cadvisor_registry: CollectorRegistry | None = None
    runtime_service: RuntimeService | None = None
    streaming_idle_timeout: float = 4 * 3600.0

    def get_pods(self) -> list[dict[str, Any]]:
        return []

    def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
        return None

    def healthz_checks(self) -> dict[str, HealthCheck]:
        return {}

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        raise LogTargetError(f'pod "{pod_name}" does not exist', 404)
