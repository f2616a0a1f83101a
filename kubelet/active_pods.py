"""The kubelet's active pods as the resource managers see them (GetActivePods,
filterOutInactivePods in pkg/kubelet/kubelet_pods.go).

A pod is active while it is known to the pod manager, was admitted, and may
still have running containers: its exclusive CPUs and memory stay allocated
until its worker has stopped every container, or it finished on its own.
Lookups are per pod, so releasing one pod's CPUs never walks all pods.
"""

from __future__ import annotations

from collections.abc import Callable

from kubelet.cm.interfaces import RunningContainer
from kubelet.container.cache import PodCache
from kubelet.pleg.differ import RUNNING
from kubelet.pod_workers import PodWorkerStates
from kubelet.podmanager import PodManager
from kubelet.types import TERMINAL_PHASES, Pod, PodStatus, uid


class ActivePods:
    def __init__(
        self,
        pod_manager: PodManager,
        rejected: set[str],
        worker_states: PodWorkerStates,
        status: Callable[[str], PodStatus | None],
        cache: PodCache,
    ) -> None:
        self.pod_manager = pod_manager
        self.rejected = rejected
        # Where each pod's worker is (built before the workers, which fill it in).
        self.worker_states = worker_states
        self.status = status
        self.cache = cache

    def active_pod(self, pod_uid: str) -> Pod | None:
        pod = self.pod_manager.get(pod_uid)
        if pod is None or pod_uid in self.rejected:
            return None
        workers = self.worker_states
        if pod_uid in workers and not workers.could_have_running_containers(pod_uid):
            return None  # known terminated
        phase = (self.status(pod_uid) or {}).get("phase")
        if phase in TERMINAL_PHASES and not workers.is_terminating(pod_uid):
            return None  # finished on its own
        return pod

    def active_pods(self) -> list[Pod]:
        return [p for p in self.pod_manager.pods() if self.active_pod(uid(p)) is not None]

    def running_containers(self, pod_uid: str) -> list[RunningContainer]:
        status, _ = self.cache.get(pod_uid)
        return [RunningContainer(c.name, c.id) for c in status.containers if c.state == RUNNING]
