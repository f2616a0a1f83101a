"""containerStatuses[].allocatedResourcesStatus (ResourceHealthStatus): set on
the regular containers that hold devices when the gate gives the status a
source of device health, absent otherwise; the status patch carries it."""

from __future__ import annotations

from typing import Any

from kubelet import types as v1
from kubelet.container.runtime import PodStatus
from kubelet.features import Feature, FeatureGate
from kubelet.status.generate import generate
from kubelet.status.status_manager import status_patch

GPU: list[v1.ResourceStatus] = [
    {"name": "example.com/gpu", "resources": [{"resourceID": "d0", "health": "Unhealthy"}]}
]


def pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "gpu", "image": "busybox"},
                {"name": "plain", "image": "busybox"},
            ],
        },
    }


def health(p: v1.Pod, name: str) -> list[v1.ResourceStatus]:
    # The init container holds devices too: upstream reports regular ones only.
    return GPU if p["metadata"]["uid"] == "u" and name in ("gpu", "init") else []


def by_name(api: v1.PodStatus, key: str = "containerStatuses") -> dict[str, Any]:
    return {c["name"]: c for c in api.get(key) or []}  # type: ignore[misc]


def test_the_gate_is_alpha_and_off_by_default() -> None:
    assert not FeatureGate().enabled(Feature.ResourceHealthStatus)
    assert FeatureGate({"ResourceHealthStatus": True}).enabled(Feature.ResourceHealthStatus)


def test_containers_holding_devices_report_their_health() -> None:
    api = generate(pod(), PodStatus("u"), {}, [], None, resource_health=health)
    cs = by_name(api)
    assert cs["gpu"]["allocatedResourcesStatus"] == GPU
    assert "allocatedResourcesStatus" not in cs["plain"]
    assert "allocatedResourcesStatus" not in by_name(api, "initContainerStatuses")["init"]


def test_without_the_gate_there_is_no_field() -> None:
    api = generate(pod(), PodStatus("u"), {}, [], None)
    for key in ("containerStatuses", "initContainerStatuses"):
        for c in by_name(api, key).values():
            assert "allocatedResourcesStatus" not in c


def test_a_health_change_is_in_the_status_patch() -> None:
    healthy: list[v1.ResourceStatus] = [
        {"name": "example.com/gpu", "resources": [{"resourceID": "d0", "health": "Healthy"}]}
    ]
    before = generate(pod(), PodStatus("u"), {}, [], None, resource_health=lambda p, n: healthy)
    after = generate(pod(), PodStatus("u"), {}, [], before, resource_health=health)
    patch = status_patch(dict(before), dict(after))
    sent = {c["name"]: c for c in patch["containerStatuses"]}  # type: ignore[union-attr]
    assert sent["gpu"]["allocatedResourcesStatus"] == GPU  # type: ignore[index]
    # Nothing changed: nothing sent.
    again = generate(pod(), PodStatus("u"), {}, [], after, resource_health=health)
    assert "containerStatuses" not in status_patch(dict(after), dict(again))
