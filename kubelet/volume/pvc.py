"""persistentVolumeClaim volumes: the claim is looked up through the API, must
be Bound to a PV that points back at it, and that PV must be a `hostPath` or
a `local` volume (the only PV types a kubelet without CSI can serve; anything
else is a FailedMount saying so). The PV's path is bind-mounted as it is, as
the hostPath plugin does; `readOnly` on the claim source makes every mount of
it read-only. A `local` PV takes the pod's fsGroup (volume/ownership.py, with
fsGroupChangePolicy); a hostPath PV does not, as upstream. A `local` PV with
`volumeMode: Block` is its device, handed to the containers' volumeDevices
(local.py); a Block hostPath PV is refused, as upstream has no block mapper
for it. Upstream resolves claims in the desired-state populator and hands the
PV to the hostpath/local plugins; here it is one plugin so that a claim that
becomes Bound later is picked up by the manager's retries.

A generic `ephemeral` volume is the claim `<pod>-<volume>` that the
ephemeral-volume controller makes from its template; it is used only when the
pod controls it. A claim bound to a CSI PV is handed to the CSI plugin
through resolve(): the volume manager then sets it up there, in the dir named
after the PV, as upstream lays it out.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubelet.client.rest import API_ERRORS, APIError
from kubelet.types import PersistentVolume, PersistentVolumeClaim, Pod
from kubelet.util import mountutil
from kubelet.volume import (
    ClaimNotReady,
    MountedVolume,
    Resolution,
    VolumeError,
    VolumeSpec,
    local,
    ownership,
)
from kubelet.volume.hostpath import check_type, validate_no_backsteps

CSI_PLUGIN_NAME = "kubernetes.io/csi"

PLUGIN_NAME = "kubernetes.io/persistent-claim"

# An API GET by path (APIClient.get): returns the decoded object, raises on errors.
APIGetter = Callable[[str], Awaitable[Any]]


def _reason(err: Exception) -> str:
    return err.message if isinstance(err, APIError) else str(err)


class PVCPlugin:
    name = PLUGIN_NAME
    requires_remount = False
    read_only = False
    selinux_relabel = False

    def __init__(self, get: APIGetter | None, root_dir: str = "") -> None:
        # None in standalone mode: there is no API server to resolve claims.
        self._get = get
        # A Block local PV's path may not pass through it (local.py).
        self._root_dir = root_dir

    def can_support(self, spec: VolumeSpec) -> bool:
        return "persistentVolumeClaim" in spec or "ephemeral" in spec

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        await self.set_up_volume(pod, spec, dir)

    async def resolve(self, pod: Pod, spec: VolumeSpec) -> Resolution | None:
        """A claim bound to a CSI PV goes to the CSI plugin; others stay here."""
        claim, read_only = _claim_of(pod, spec)
        pv, _ = await self._bound_pv(pod, spec, claim)
        check_volume_mode(pod, str(spec["name"]), pv)
        if "csi" not in (pv.get("spec") or {}):
            return None
        pv_name = str(pv["metadata"]["name"])
        ns = str(pod["metadata"].get("namespace") or "default")
        return Resolution(
            CSI_PLUGIN_NAME,
            pv_name,
            {
                "name": spec["name"],
                "persistentVolume": pv,
                "readOnly": read_only,
                "claim": {"namespace": ns, "name": claim},
            },
        )

    async def set_up_volume(self, pod: Pod, spec: VolumeSpec, dir: str) -> MountedVolume:
        claim, read_only = _claim_of(pod, spec)
        pv, pv_name = await self._bound_pv(pod, spec, claim)
        return await self._use_pv(pod, spec, claim, pv, pv_name, read_only)

    async def _bound_pv(
        self, pod: Pod, spec: VolumeSpec, claim: str
    ) -> tuple[PersistentVolume, str]:
        """The PV the claim is bound to, checked both ways (and, for an
        ephemeral volume, that the claim is the pod's own)."""
        ns = pod["metadata"].get("namespace") or "default"
        prefix = f"error processing PVC {ns}/{claim}"
        if self._get is None:
            raise VolumeError(
                f"{prefix}: persistentVolumeClaim volumes need an API server "
                "and this kubelet runs in standalone mode"
            )
        try:
            pvc: PersistentVolumeClaim = await self._get(
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}"
            )
        except API_ERRORS as err:
            raise ClaimNotReady(
                f"{prefix}: failed to fetch PVC from API server: {_reason(err)}"
            ) from err
        if "ephemeral" in spec:
            _check_owner(pod, pvc, ns, claim, prefix)
        if (pvc.get("metadata") or {}).get("deletionTimestamp"):
            raise ClaimNotReady(
                f"{prefix}: can't start pod because PVC {ns}/{claim} is being deleted"
            )
        phase = (pvc.get("status") or {}).get("phase") or ""
        pv_name = (pvc.get("spec") or {}).get("volumeName") or ""
        if phase != "Bound" or not pv_name:
            raise ClaimNotReady(
                f'{prefix}: PVC {ns}/{claim} has non-bound phase ("{phase}") '
                f'or empty pvc.Spec.VolumeName ("{pv_name}")'
            )
        try:
            pv: PersistentVolume = await self._get(f"/api/v1/persistentvolumes/{pv_name}")
        except API_ERRORS as err:
            raise ClaimNotReady(
                f"{prefix}: failed to fetch PV {pv_name} from API server: {_reason(err)}"
            ) from err
        pv_spec = pv.get("spec") or {}
        claim_ref = pv_spec.get("claimRef") or {}
        if not claim_ref:
            raise ClaimNotReady(
                f"{prefix}: found PV object {pv_name} but it has a nil or empty ClaimRef"
            )
        pvc_uid = (pvc.get("metadata") or {}).get("uid") or ""
        if claim_ref.get("uid") != pvc_uid:
            raise ClaimNotReady(
                f"{prefix}: found PV object {pv_name} but its ClaimRef.UID "
                f"{claim_ref.get('uid')} does not point to claimed PVC.UID {pvc_uid}"
            )
        return pv, pv_name

    async def _use_pv(
        self,
        pod: Pod,
        spec: VolumeSpec,
        claim: str,
        pv: PersistentVolume,
        pv_name: str,
        read_only: bool,
    ) -> MountedVolume:
        ns = pod["metadata"].get("namespace") or "default"
        pv_spec = pv.get("spec") or {}
        if (pv_spec.get("volumeMode") or "Filesystem") == "Block":
            return await self._map_pv(spec, pv, pv_name, read_only)
        loop = asyncio.get_running_loop()
        if "hostPath" in pv_spec:
            hp = pv_spec["hostPath"] or {}
            path = str(hp.get("path") or "")
            validate_no_backsteps(path)
            await loop.run_in_executor(None, check_type, path, str(hp.get("type") or ""))
        elif "local" in pv_spec:
            path = str((pv_spec["local"] or {}).get("path") or "")
            if not path:
                raise VolumeError(f'LocalVolume volume "{pv_name}" path is empty')
            if ".." in path.split("/"):
                raise VolumeError(f"invalid path: {path} must not contain '..'")
            await loop.run_in_executor(None, _must_exist, path)
            # A local PV (unlike hostPath) takes the pod's fsGroup, as upstream,
            # unless the claim mounts it read-only.
            psc = (pod.get("spec") or {}).get("securityContext") or {}
            if psc.get("fsGroup") is not None and not read_only:
                await loop.run_in_executor(
                    None,
                    ownership.set_volume_ownership,
                    path,
                    int(psc["fsGroup"]),
                    psc.get("fsGroupChangePolicy"),
                )
        else:
            kind = next((k for k in pv_spec if k not in _PV_FIELDS), "unknown")
            raise VolumeError(
                f"PersistentVolume {pv_name} (claim {ns}/{claim}) is a {kind} volume: "
                "only hostPath, local and CSI persistent volumes are supported by this kubelet"
            )
        return MountedVolume(name=spec["name"], host_path=path, read_only=read_only)

    async def _map_pv(
        self, spec: VolumeSpec, pv: PersistentVolume, pv_name: str, read_only: bool
    ) -> MountedVolume:
        """A Block PV: a local one is its device (local.py); no other PV
        type this plugin serves has a block mode, as upstream (only the local
        and CSI plugins map block volumes)."""
        pv_spec = pv.get("spec") or {}
        if "local" not in pv_spec:
            kind = next((k for k in pv_spec if k not in _PV_FIELDS), "unknown")
            raise VolumeError(
                f'PersistentVolume {pv_name} is a {kind} volume with volumeMode "Block": '
                "no volume plugin maps it as a block device (only local and CSI ones)",
                "MapVolume.FindMapperPluginBySpec",
            )
        path = str((pv_spec["local"] or {}).get("path") or "")
        if not path:
            raise VolumeError(f'LocalVolume volume "{pv_name}" path is empty')
        device = await asyncio.get_running_loop().run_in_executor(
            None, local.block_device, pv_name, path, self._root_dir
        )
        return MountedVolume(name=spec["name"], host_path=device, read_only=read_only, block=True)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        return None  # the PV's path is used in place: nothing was made for the pod


def check_volume_mode(pod: Pod, name: str, pv: PersistentVolume) -> None:
    """A Block PV only through volumeDevices, a Filesystem one only through
    volumeMounts, in any container of the pod (the populator's check upstream,
    with its messages)."""
    mode = str((pv.get("spec") or {}).get("volumeMode") or "Filesystem")
    spec = pod.get("spec") or {}
    containers = [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]
    mounts = any(m.get("name") == name for c in containers for m in c.get("volumeMounts") or [])
    devices = any(d.get("name") == name for c in containers for d in c.get("volumeDevices") or [])
    if mounts and mode != "Filesystem":
        raise VolumeError(f"volume {name} has volumeMode {mode}, but is specified in volumeMounts")
    if devices and mode != "Block":
        raise VolumeError(f"volume {name} has volumeMode {mode}, but is specified in volumeDevices")


def _claim_of(pod: Pod, spec: VolumeSpec) -> tuple[str, bool]:
    """(claim name, readOnly) of a persistentVolumeClaim or ephemeral volume."""
    if "ephemeral" in spec:
        # VolumeClaimName upstream: what the ephemeral-volume controller creates.
        return f"{pod['metadata'].get('name', '')}-{spec['name']}", False
    src: Mapping[str, object] = spec.get("persistentVolumeClaim") or {}
    return str(src.get("claimName") or ""), bool(src.get("readOnly"))


def claim_refs(pod: Pod | None) -> dict[str, tuple[str, str]]:
    """The pod's claim volumes: name -> (namespace, claim), for pvcRef."""
    if pod is None:
        return {}
    ns = pod["metadata"].get("namespace", "")
    return {
        v["name"]: (ns, _claim_of(pod, v)[0])
        for v in pod["spec"].get("volumes") or []
        if "persistentVolumeClaim" in v or "ephemeral" in v
    }


def _check_owner(pod: Pod, pvc: PersistentVolumeClaim, ns: str, claim: str, prefix: str) -> None:
    # VolumeIsForPod: the claim must be controlled by this very pod, else a
    # claim someone made under the same name would be mounted into it.
    meta = pvc.get("metadata") or {}
    uid = pod["metadata"].get("uid")
    owned = any(
        r.get("controller") and r.get("uid") == uid for r in meta.get("ownerReferences") or []
    )
    if not owned or (meta.get("namespace") or ns) != ns:
        raise VolumeError(
            f"{prefix}: PVC {ns}/{claim} was not created for pod {ns}/"
            f"{pod['metadata'].get('name', '')} (pod is not owner)"
        )


# PersistentVolumeSpec fields that are not the volume source.
_PV_FIELDS = {
    "accessModes", "capacity", "claimRef", "mountOptions", "nodeAffinity",
    "persistentVolumeReclaimPolicy", "storageClassName", "volumeMode",
    "volumeAttributesClassName",
}  # fmt: skip


def _must_exist(path: str) -> None:
    try:
        os.stat(path)
    except OSError as err:
        raise VolumeError(mountutil.go_path_error("stat", err)) from err
