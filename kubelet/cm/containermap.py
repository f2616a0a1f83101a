"""Container ID <-> (pod UID, container name) (pkg/kubelet/cm/containermap).

One ID per (pod, name): a new instance of a container (a restart) replaces
the old one, so a late removal of the old instance cannot release what the
new one holds, and crash-looping containers leave nothing behind.
"""

from __future__ import annotations


class ContainerMap:
    def __init__(self) -> None:
        self._by_id: dict[str, tuple[str, str]] = {}
        self._by_ref: dict[tuple[str, str], str] = {}

    def add(self, pod_uid: str, container_name: str, container_id: str) -> None:
        ref = (pod_uid, container_name)
        self.remove_by_container_id(container_id)
        self.remove_by_container_ref(pod_uid, container_name)
        self._by_id[container_id] = ref
        self._by_ref[ref] = container_id

    def remove_by_container_id(self, container_id: str) -> None:
        ref = self._by_id.pop(container_id, None)
        if ref is not None:
            del self._by_ref[ref]

    def remove_by_container_ref(self, pod_uid: str, container_name: str) -> None:
        cid = self._by_ref.pop((pod_uid, container_name), None)
        if cid is not None:
            del self._by_id[cid]

    def get_container_id(self, pod_uid: str, container_name: str) -> str | None:
        return self._by_ref.get((pod_uid, container_name))

    def get_container_ref(self, container_id: str) -> tuple[str, str] | None:
        return self._by_id.get(container_id)

    def refs(self) -> list[tuple[str, str]]:
        return list(self._by_ref)

    def __len__(self) -> int:
        return len(self._by_id)
