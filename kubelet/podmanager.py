"""The desired pods, by UID and by full name, and the mirror pods of static pods
by full name (pkg/kubelet/pod/pod_manager.go)."""

from __future__ import annotations

from collections.abc import Sequence

from kubelet import metrics
from kubelet.objectcache import PodObjectManager
from kubelet.types import Pod, full_name, uid


class PodManager:
    def __init__(self, object_managers: Sequence[PodObjectManager] = ()) -> None:
        # The configMap and secret managers learn here which objects the node's
        # pods reference, as upstream's pod manager tells them.
        self._object_managers = list(object_managers)
        self._by_uid: dict[str, Pod] = {}
        self._by_full_name: dict[str, str] = {}
        self._mirrors: dict[str, Pod] = {}  # full name -> mirror pod
        # Bumped when a pod is added or removed (not on updates): housekeeping
        # skips work that depends only on which pods are desired.
        self.generation = 0

    def add_or_update(self, pod: Pod) -> None:
        u = uid(pod)
        old = self._by_uid.get(u)
        if old is None:
            self.generation += 1
        if old is not None and full_name(old) != full_name(pod):
            self._by_full_name.pop(full_name(old), None)
        self._by_uid[u] = pod
        self._by_full_name[full_name(pod)] = u
        _count_ephemeral(old, pod)
        for m in self._object_managers:
            m.register_pod(pod)

    def remove(self, pod: Pod) -> None:
        u = uid(pod)
        old = self._by_uid.pop(u, None)
        if old is not None:
            self.generation += 1
        if old is not None and self._by_full_name.get(full_name(old)) == u:
            del self._by_full_name[full_name(old)]
        if old is not None:
            _count_ephemeral(old, None)
            for m in self._object_managers:
                m.unregister_pod(old)

    def get(self, pod_uid: str) -> Pod | None:
        return self._by_uid.get(pod_uid)

    def get_by_full_name(self, name: str) -> Pod | None:
        u = self._by_full_name.get(name)
        return self._by_uid.get(u) if u else None

    def pods(self) -> list[Pod]:
        return list(self._by_uid.values())

    def uids(self) -> set[str]:
        return set(self._by_uid)

    def __len__(self) -> int:
        return len(self._by_uid)

    def set_mirror(self, pod: Pod) -> None:
        self._mirrors[full_name(pod)] = pod

    def remove_mirror(self, pod: Pod) -> None:
        cur = self._mirrors.get(full_name(pod))
        if cur is not None and uid(cur) == uid(pod):
            del self._mirrors[full_name(pod)]

    def get_mirror(self, static: Pod) -> Pod | None:
        return self._mirrors.get(full_name(static))

    def mirrors(self) -> list[Pod]:
        return list(self._mirrors.values())


def _count_ephemeral(old: Pod | None, new: Pod | None) -> None:
    """kubelet_managed_ephemeral_containers follows the pods' specs."""
    delta = _ephemeral(new) - _ephemeral(old)
    if delta:
        metrics.MANAGED_EPHEMERAL_CONTAINERS.inc(delta)


def _ephemeral(pod: Pod | None) -> int:
    return 0 if pod is None else len(pod["spec"].get("ephemeralContainers") or [])
