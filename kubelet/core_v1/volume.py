"""A pod's volumes as core/v1 spells them (only the sources this kubelet mounts
or refuses by name).
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from kubelet.core_v1.meta import (
    KeyToPath,
    LocalObjectReference,
    ObjectFieldSelector,
    Quantity,
    ResourceFieldSelector,
)
from kubelet.core_v1.storage import HostPathVolumeSource, PersistentVolume


class EmptyDirVolumeSource(TypedDict, total=False):
    medium: str
    sizeLimit: Quantity


class SecretVolumeSource(TypedDict, total=False):
    secretName: str
    items: list[KeyToPath]
    defaultMode: int
    optional: bool


class ConfigMapVolumeSource(TypedDict, total=False):
    name: str
    items: list[KeyToPath]
    defaultMode: int
    optional: bool


class DownwardAPIVolumeFile(TypedDict, total=False):
    path: Required[str]
    fieldRef: ObjectFieldSelector
    resourceFieldRef: ResourceFieldSelector
    mode: int


class DownwardAPIVolumeSource(TypedDict, total=False):
    items: list[DownwardAPIVolumeFile]
    defaultMode: int


class ServiceAccountTokenProjection(TypedDict, total=False):
    audience: str
    expirationSeconds: int
    path: Required[str]


class KeysProjection(TypedDict, total=False):
    """A projected volume's secret and configMap sources: one shape."""

    name: str
    items: list[KeyToPath]
    optional: bool


SecretProjection = KeysProjection
ConfigMapProjection = KeysProjection


class VolumeProjection(TypedDict, total=False):
    secret: SecretProjection
    downwardAPI: DownwardAPIVolumeSource
    configMap: ConfigMapProjection
    serviceAccountToken: ServiceAccountTokenProjection


class ProjectedVolumeSource(TypedDict, total=False):
    sources: list[VolumeProjection]
    defaultMode: int


class PersistentVolumeClaimVolumeSource(TypedDict, total=False):
    claimName: Required[str]
    readOnly: bool


class CSIVolumeSource(TypedDict, total=False):
    driver: Required[str]
    readOnly: bool
    fsType: str
    volumeAttributes: dict[str, str]
    nodePublishSecretRef: LocalObjectReference


class Volume(TypedDict, total=False):
    name: Required[str]
    hostPath: HostPathVolumeSource
    emptyDir: EmptyDirVolumeSource
    secret: SecretVolumeSource
    configMap: ConfigMapVolumeSource
    downwardAPI: DownwardAPIVolumeSource
    projected: ProjectedVolumeSource
    persistentVolumeClaim: PersistentVolumeClaimVolumeSource
    csi: CSIVolumeSource
    ephemeral: dict[str, Any]  # its volumeClaimTemplate is the controller's business
    # Not API fields: what the PVC plugin hands the plugin of the bound PV.
    persistentVolume: PersistentVolume
    readOnly: bool
    claim: ClaimRef


class ClaimRef(TypedDict):
    namespace: str
    name: str
