"""PLEG event types (pkg/kubelet/pleg/pleg.go)."""

from __future__ import annotations

from typing import NamedTuple

CONTAINER_STARTED = "ContainerStarted"
CONTAINER_DIED = "ContainerDied"
CONTAINER_REMOVED = "ContainerRemoved"
CONTAINER_CHANGED = "ContainerChanged"
POD_SYNC = "PodSync"


class PodLifecycleEvent(NamedTuple):
    pod_uid: str
    type: str
    data: str  # the container (or sandbox) ID
