"""Admission by pod features (lifecycle/features_linux.go): a pod with pod-level
resources is refused while the PodLevelResources gate is off, never run as if
spec.resources were not there."""

from __future__ import annotations

from kubelet.lifecycle.predicate import Rejection
from kubelet.resourcehelper import is_pod_level_resources_set
from kubelet.types import Pod

# lifecycle.PodLevelResourcesNotAdmittedReason
POD_LEVEL_NOT_ADMITTED_REASON = "PodLevelResourcesNotSupported"


def admit_pod_features(pod: Pod, pod_level_resources: bool) -> Rejection | None:
    if not pod_level_resources and is_pod_level_resources_set(pod):
        return Rejection(
            POD_LEVEL_NOT_ADMITTED_REASON, "PodLevelResources feature gate is disabled"
        )
    return None
