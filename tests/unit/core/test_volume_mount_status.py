"""containerStatuses[].volumeMounts (RecursiveReadOnlyMounts, GA): each mount
as the spec names it, a read-only one saying whether it was made recursively
read-only; carried from the previous status once reported (immutable)."""

from __future__ import annotations

from typing import Any

from kubelet.container.runtime import PodStatus
from kubelet.status.generate import generate

MOUNTS = [
    {"name": "data", "mountPath": "/data"},
    {"name": "cfg", "mountPath": "/cfg", "readOnly": True},
    {"name": "tree", "mountPath": "/tree", "readOnly": True, "recursiveReadOnly": "IfPossible"},
    {"name": "must", "mountPath": "/must", "readOnly": True, "recursiveReadOnly": "Enabled"},
]


def pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "i", "image": "busybox", "volumeMounts": MOUNTS[:1]}],
            "containers": [{"name": "c", "image": "busybox", "volumeMounts": MOUNTS},
                           {"name": "bare", "image": "busybox"}],
        },
    }  # fmt: skip


def statuses(supported: bool, old: dict[str, Any] | None = None) -> dict[str, Any]:
    api = generate(pod(), PodStatus("u"), {}, [], old, rro_supported=supported)
    return {c["name"]: c for c in api["containerStatuses"] + api["initContainerStatuses"]}


def test_each_mount_is_reported_and_read_only_ones_say_how() -> None:
    st = statuses(True)
    assert st["c"]["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "cfg", "mountPath": "/cfg", "readOnly": True, "recursiveReadOnly": "Disabled"},
        {"name": "tree", "mountPath": "/tree", "readOnly": True, "recursiveReadOnly": "Enabled"},
        {"name": "must", "mountPath": "/must", "readOnly": True, "recursiveReadOnly": "Enabled"},
    ]
    assert st["i"]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert "volumeMounts" not in st["bare"]


def test_without_runtime_support_they_are_disabled() -> None:
    # "Enabled" cannot be honoured: the container fails to start; its status says Disabled.
    modes = [m.get("recursiveReadOnly") for m in statuses(False)["c"]["volumeMounts"]]
    assert modes == [None, "Disabled", "Disabled", "Disabled"]


def test_once_reported_they_are_carried_over() -> None:
    first = generate(pod(), PodStatus("u"), {}, [], None, rro_supported=False)
    again = generate(pod(), PodStatus("u"), {}, [], first, rro_supported=True)
    assert (
        again["containerStatuses"][0]["volumeMounts"]
        == first["containerStatuses"][0]["volumeMounts"]
    )
