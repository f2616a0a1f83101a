"""What the kubelet's servers read of the node (server.HostInterface, answered
upstream by kubelet_getters.go and the log half of kubelet_pods.go): the pods
as the kubelet runs them, health checks, container logs, the runtime for
exec/attach/port-forward, and the stats registries. Built once by the Kubelet
from its components; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

from kubelet.cri import errors as cri_errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime.logs import LogOptions, LogTargetError, log_container_id, read_logs
from kubelet.podmanager import PodManager
from kubelet.stats.provider import StatsProvider
from kubelet.status.status_manager import StatusManager
from kubelet.types import Pod, container_list, uid
from kubelet.util.clock import Clock

# /healthz/syncloop fails when the loop has not come round for twice the sync
# frequency, and never sooner than five minutes (SyncLoopHealthCheck upstream).
SYNC_LOOP_MIN_THRESHOLD = 300.0

HealthCheck = Callable[[], str | None]


class SyncLoopHeartbeat:
    """When the syncLoop last came round (monotonic seconds; 0: not yet)."""

    def __init__(self) -> None:
        self.last = 0.0

    def beat(self, now: float) -> None:
        self.last = now

    def last_beat(self) -> float:
        return self.last


class KubeletHost:
    """Implements server.NodeView."""

    def __init__(
        self,
        pod_manager: PodManager,
        status_manager: StatusManager,
        runtime: RuntimeService,
        stats: StatsProvider,
        resource_registry: CollectorRegistry,
        cadvisor_registry: CollectorRegistry,
        *,
        sync_frequency: float,
        streaming_idle_timeout: float,
        last_loop: Callable[[], float],
        pleg_healthy: HealthCheck,
        device_plugins: HealthCheck,
        clock: Clock,
    ) -> None:
        self.pod_manager = pod_manager
        self.status_manager = status_manager
        self.runtime = runtime
        self.stats = stats
        self.resource_registry = resource_registry
        self.cadvisor_registry = cadvisor_registry
        self.sync_frequency = sync_frequency
        self.streaming_idle_timeout = streaming_idle_timeout
        # Monotonic time of the sync loop's last iteration (0: not started).
        self.last_loop = last_loop
        self.pleg_healthy = pleg_healthy
        self.device_plugins = device_plugins
        self.clock = clock

    @property
    def runtime_service(self) -> RuntimeService:
        return self.runtime

    def get_pods(self) -> list[Pod]:
        """The pods as the kubelet runs them, each with the status it computed."""
        out = []
        for pod in self.pod_manager.pods():
            p = pod.copy()
            st = self.status_manager.get(uid(pod))
            if st is not None:
                p["status"] = st
            out.append(p)
        return out

    def get_pod_by_name(self, namespace_: str, name: str) -> Pod | None:
        return self.pod_manager.get_by_full_name(f"{name}_{namespace_}")

    def healthz_checks(self) -> dict[str, HealthCheck]:
        def syncloop() -> str | None:
            last = self.last_loop()
            if not last:
                return None
            ago = self.clock.monotonic() - last
            threshold = max(2 * self.sync_frequency, SYNC_LOOP_MIN_THRESHOLD)
            if ago > threshold:
                return f"sync loop last ran {ago:.0f}s ago (threshold {threshold:.0f}s)"
            return None

        return {"syncloop": syncloop, "pleg": self.pleg_healthy,
                "device-plugin": self.device_plugins}  # fmt: skip

    async def container_logs(
        self,
        namespace_: str,
        pod_name: str,
        container: str,
        opts: LogOptions,
        write: Callable[[bytes], Awaitable[None]],
    ) -> None:
        """Stream a container's log (GetKubeletContainerLogs upstream). Raises
        LogTargetError, before writing anything, when there is no log to read."""
        pod = self.pod_manager.get_by_full_name(f"{pod_name}_{namespace_}")
        if pod is None:
            raise LogTargetError(f'pod "{pod_name}" does not exist', 404)
        if container_list(pod, container) is None:
            raise LogTargetError(f'container "{container}" not found in pod "{pod_name}"', 404)
        cid = log_container_id(
            self.status_manager.get(uid(pod)), pod_name, container, opts.previous
        )
        try:
            path = (await self.runtime.container_status(cid)).status.log_path
        except cri_errors.CRIError as err:
            raise LogTargetError(f"failed to get the status of container {cid}: {err}") from err
        if not path:
            raise LogTargetError(f'container "{container}" in pod "{pod_name}" has no log path')

        async def running() -> bool:
            try:
                st = (await self.runtime.container_status(cid)).status
            except cri_errors.CRIError:
                return False
            return bool(st.state == pb.CONTAINER_RUNNING)

        try:
            await read_logs(path, opts, write, running)
        except FileNotFoundError as err:
            raise LogTargetError(f'failed to open log file "{path}": {err.strerror}') from err
