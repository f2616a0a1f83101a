"""kubelet_managed_ephemeral_containers follows the pod manager's pods."""

from __future__ import annotations

from typing import Any

from kubelet import metrics
from kubelet.podmanager import PodManager


def pod(uid: str, ephemeral: int) -> Any:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if ephemeral:
        spec["ephemeralContainers"] = [{"name": f"debug-{i}"} for i in range(ephemeral)]
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "spec": spec}


def value() -> float:
    v = metrics.REGISTRY.get_sample_value("kubelet_managed_ephemeral_containers")
    assert v is not None
    return v


def test_ephemeral_containers_counted_as_pods_come_change_and_go() -> None:
    m, start = PodManager(), value()
    m.add_or_update(pod("a", 0))
    m.add_or_update(pod("b", 2))
    assert value() == start + 2
    m.add_or_update(pod("a", 1))  # kubectl debug added one to a
    assert value() == start + 3
    m.remove(pod("b", 2))
    m.remove(pod("b", 2))  # a second removal changes nothing
    assert value() == start + 1
    m.remove(pod("a", 1))
    assert value() == start
