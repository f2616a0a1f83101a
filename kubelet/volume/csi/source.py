"""What a CSI volume is, from the pod's inline `csi` volume or from the PV a
claim is bound to (getSourceFromSpec upstream).

A claim reaches this plugin already resolved by the PVC plugin, as the spec
`{"name": <pod volume name>, "persistentVolume": <PV>, "readOnly": bool,
"claim": {"namespace", "name"}}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubelet.types import PersistentVolume, Pod
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume.csi import paths, validate_driver_name

PV_KEY = "persistentVolume"

# PV access modes -> CSI, plain and with SINGLE_NODE_MULTI_WRITER (csi_client.go).
_ACCESS = {
    "ReadWriteOnce": ("SINGLE_NODE_WRITER", "SINGLE_NODE_MULTI_WRITER"),
    "ReadOnlyMany": ("MULTI_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"),
    "ReadWriteMany": ("MULTI_NODE_MULTI_WRITER", "MULTI_NODE_MULTI_WRITER"),
    "ReadWriteOncePod": ("SINGLE_NODE_WRITER", "SINGLE_NODE_SINGLE_WRITER"),
}

SecretRef = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class CSIVolume:
    driver: str
    handle: str
    mode: str  # paths.PERSISTENT | paths.EPHEMERAL
    dir_name: str  # the PV's name, or the pod volume's
    read_only: bool = False
    fs_type: str = ""
    attributes: dict[str, str] = field(default_factory=dict)
    mount_options: tuple[str, ...] = ()
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    stage_secret: SecretRef | None = None
    publish_secret: SecretRef | None = None
    expand_secret: SecretRef | None = None
    pv_name: str = ""
    claim: tuple[str, str] | None = None  # (namespace, name) of the PVC

    @property
    def persistent(self) -> bool:
        return self.mode == paths.PERSISTENT

    def csi_access_mode(self, single_node_multi_writer: bool) -> str:
        first = self.access_modes[0] if self.access_modes else "ReadWriteOnce"
        pair = _ACCESS.get(first, ("UNKNOWN", "UNKNOWN"))
        return pair[1] if single_node_multi_writer else pair[0]


def _ref(obj: object, default_ns: str = "") -> SecretRef | None:
    if not isinstance(obj, dict) or not obj.get("name"):
        return None
    return (str(obj.get("namespace") or default_ns), str(obj["name"]))


def _strings(d: Mapping[str, object] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (d or {}).items()}


def is_csi_spec(spec: VolumeSpec) -> bool:
    if "csi" in spec:
        return True
    pv = spec.get("persistentVolume")
    return isinstance(pv, dict) and "csi" in (pv.get("spec") or {})


def from_spec(pod: Pod, spec: VolumeSpec) -> CSIVolume:
    vol = _from_pv(spec) if PV_KEY in spec else _from_inline(pod, spec)
    why = validate_driver_name(vol.driver)
    if why:
        raise VolumeError(why)
    paths.check_dir_name(vol.dir_name)
    return vol


def _from_inline(pod: Pod, spec: VolumeSpec) -> CSIVolume:
    src: Mapping[str, Any] = spec.get("csi") or {}
    name = str(spec.get("name") or "")
    uid = str(pod["metadata"]["uid"])
    ns = str(pod["metadata"].get("namespace") or "default")
    return CSIVolume(
        driver=str(src.get("driver") or ""),
        handle=paths.inline_volume_handle(uid, name),
        mode=paths.EPHEMERAL,
        dir_name=name,
        read_only=bool(src.get("readOnly")),
        fs_type=str(src.get("fsType") or ""),
        attributes=_strings(src.get("volumeAttributes")),
        # An inline volume's secret is always in the pod's namespace.
        publish_secret=_ref({"name": (src.get("nodePublishSecretRef") or {}).get("name")}, ns),
    )


def _from_pv(spec: VolumeSpec) -> CSIVolume:
    pv = spec["persistentVolume"]
    pv_spec = pv.get("spec") or {}
    src: Mapping[str, Any] = pv_spec.get("csi") or {}
    claim = spec.get("claim")
    return CSIVolume(
        driver=str(src.get("driver") or ""),
        handle=str(src.get("volumeHandle") or ""),
        mode=paths.PERSISTENT,
        dir_name=str((pv.get("metadata") or {}).get("name") or ""),
        # readOnly on the pod's claim source or on the PV's csi source.
        read_only=bool(spec.get("readOnly")) or bool(src.get("readOnly")),
        fs_type=str(src.get("fsType") or ""),
        attributes=_strings(src.get("volumeAttributes")),
        mount_options=tuple(str(o) for o in pv_spec.get("mountOptions") or []),
        access_modes=tuple(str(m) for m in pv_spec.get("accessModes") or []),
        volume_mode=str(pv_spec.get("volumeMode") or "Filesystem"),
        stage_secret=_ref(src.get("nodeStageSecretRef")),
        publish_secret=_ref(src.get("nodePublishSecretRef")),
        expand_secret=_ref(src.get("nodeExpandSecretRef")),
        pv_name=str((pv.get("metadata") or {}).get("name") or ""),
        claim=(claim["namespace"], claim["name"]) if claim else None,
    )


def pv_spec_for(
    pod_volume: str, pv: PersistentVolume, read_only: bool, claim: tuple[str, str]
) -> VolumeSpec:
    """The spec the PVC plugin hands over for a claim bound to a CSI PV."""
    return {
        "name": pod_volume,
        "persistentVolume": pv,
        "readOnly": read_only,
        "claim": {"namespace": claim[0], "name": claim[1]},
    }
