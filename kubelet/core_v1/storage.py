"""PersistentVolumeClaim and PersistentVolume, as the volume plugins read them
(claim resolution, CSI set-up, expansion): only the fields read or patched.
The hostPath source is here as both a PV and a pod volume use it.
"""

from __future__ import annotations

from typing import Required, TypedDict

from kubelet.core_v1.meta import ObjectMeta, ObjectReference, ResourceList


class HostPathVolumeSource(TypedDict, total=False):
    path: Required[str]
    type: str


class VolumeResourceRequirements(TypedDict, total=False):
    limits: ResourceList
    requests: ResourceList


class PersistentVolumeClaimCondition(TypedDict, total=False):
    type: Required[str]  # Resizing, FileSystemResizePending, ...
    status: Required[str]
    reason: str
    message: str
    lastProbeTime: str
    lastTransitionTime: str


class PersistentVolumeClaimSpec(TypedDict, total=False):
    volumeName: str
    accessModes: list[str]
    volumeMode: str
    storageClassName: str
    resources: VolumeResourceRequirements


class PersistentVolumeClaimStatus(TypedDict, total=False):
    phase: str
    accessModes: list[str]
    capacity: ResourceList
    allocatedResources: ResourceList
    # resource name -> ControllerResizeInProgress, NodeResizePending, ...
    allocatedResourceStatuses: dict[str, str]
    conditions: list[PersistentVolumeClaimCondition]


class PersistentVolumeClaim(TypedDict, total=False):
    metadata: Required[ObjectMeta]
    spec: PersistentVolumeClaimSpec
    status: PersistentVolumeClaimStatus


class SecretReference(TypedDict, total=False):
    name: str
    namespace: str


class CSIPersistentVolumeSource(TypedDict, total=False):
    driver: Required[str]
    volumeHandle: Required[str]
    readOnly: bool
    fsType: str
    volumeAttributes: dict[str, str]
    controllerPublishSecretRef: SecretReference
    nodeStageSecretRef: SecretReference
    nodePublishSecretRef: SecretReference
    controllerExpandSecretRef: SecretReference
    nodeExpandSecretRef: SecretReference


class LocalVolumeSource(TypedDict, total=False):
    path: Required[str]
    fsType: str


class PersistentVolumeSpec(TypedDict, total=False):
    claimRef: ObjectReference
    accessModes: list[str]
    capacity: ResourceList
    volumeMode: str  # Filesystem (the default) or Block
    mountOptions: list[str]
    storageClassName: str
    persistentVolumeReclaimPolicy: str
    csi: CSIPersistentVolumeSource
    hostPath: HostPathVolumeSource
    local: LocalVolumeSource


class PersistentVolumeStatus(TypedDict, total=False):
    phase: str


class PersistentVolume(TypedDict, total=False):
    metadata: Required[ObjectMeta]
    spec: PersistentVolumeSpec
    status: PersistentVolumeStatus
