"""The volume manager (pkg/kubelet/volumemanager upstream): desired state from
the pods on the node, actual state of what is mounted, and a reconciler that
brings one to the other. The pod syncer and the runtime helper use it only
through VolumeManager.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kubelet.types import Pod
from kubelet.volume import MountedVolume

__all__ = ["MountedVolume", "Pod", "VolumeManager"]


class VolumeManager(Protocol):
    def add_pod(self, pod: Pod) -> None:
        """The pod is on this node and admitted: its volumes are wanted. The
        reconciler starts setting them up in the background."""
        ...

    def remove_pod(self, pod_uid: str) -> None:
        """The pod is terminated: its volumes may be torn down."""
        ...

    def unmounted_volumes(self, pod: Pod) -> list[str]:
        """Names of the pod's volumes not set up yet (empty: all ready).
        Never blocks: the pod syncer calls it on every sync, and the manager
        calls its on_pod_ready callback when a pod's volumes become ready."""
        ...

    def get_mounted_volumes(self, pod_uid: str) -> Mapping[str, MountedVolume]: ...

    async def wait_for_unmount(self, pod_uid: str, timeout: float) -> bool:
        """True once every volume of the pod is torn down."""
        ...
