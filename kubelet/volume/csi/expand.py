"""Node-side expansion of a mounted CSI volume (NodeExpander upstream).

When a claim's PV has grown (the resizer ran ControllerExpandVolume and set
the PV's capacity) and the claim says the node's part is pending
(`status.allocatedResourceStatuses.storage: NodeResizePending`), the kubelet
marks it in progress, calls NodeExpandVolume on the mounted volume, and
records the new capacity in the claim's status. Checked on each remount of
the volume (periodic, and on the pod's updates).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kubelet.client.rest import APIClient, APIError
from kubelet.events import Recorder
from kubelet.types import PersistentVolume, PersistentVolumeClaim, Pod, ResourceList, object_ref
from kubelet.util.quantity import parse_quantity
from kubelet.volume import VolumeError
from kubelet.volume.csi import paths, requests
from kubelet.volume.csi.api import csi_pb2 as pb
from kubelet.volume.csi.client import EXPAND_VOLUME, SINGLE_NODE_MULTI_WRITER, STAGE_UNSTAGE
from kubelet.volume.csi.drivers import DriversStore
from kubelet.volume.csi.source import CSIVolume

log = logging.getLogger(__name__)

NODE_RESIZE_PENDING = "NodeResizePending"
NODE_RESIZE_IN_PROGRESS = "NodeResizeInProgress"
NODE_RESIZE_ERROR = "NodeResizeError"
# Conditions a finished expansion clears (MergeResizeConditionOnPVC).
_RESIZE_CONDITIONS = {"Resizing", "FileSystemResizePending", NODE_RESIZE_ERROR}


def _storage(obj: ResourceList | None) -> str:
    return str((obj or {}).get("storage") or "0")


class Expander:
    def __init__(
        self,
        client: APIClient | None,
        drivers: DriversStore,
        root_dir: str,
        recorder: Recorder | None = None,
    ) -> None:
        self.client = client
        self.drivers = drivers
        self.root_dir = root_dir
        self.recorder = recorder

    async def expand(self, pod: Pod, vol: CSIVolume, target: str) -> None:
        if self.client is None or vol.claim is None or not vol.pv_name:
            return
        ns, name = vol.claim
        pvc_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
        pvc: PersistentVolumeClaim = await self.client.get(pvc_path)
        pv: PersistentVolume = await self.client.get(f"/api/v1/persistentvolumes/{vol.pv_name}")
        new_size = _storage((pv.get("spec") or {}).get("capacity"))
        status = pvc.get("status") or {}
        if parse_quantity(_storage(status.get("capacity"))) >= parse_quantity(new_size):
            return  # nothing to grow
        resize = (status.get("allocatedResourceStatuses") or {}).get("storage", "")
        if resize not in (NODE_RESIZE_PENDING, NODE_RESIZE_IN_PROGRESS):
            log.info("NodeExpandVolume of %s/%s waits: resize status %r", ns, name, resize)
            return
        if vol.volume_mode == paths.BLOCK:
            log.warning(
                "NodeExpandVolume of %s/%s not done: expanding raw block volumes on the node "
                "is not implemented by this kubelet", ns, name,
            )  # fmt: skip
            return
        rv = (pvc.get("metadata") or {}).get("resourceVersion")
        pvc = await self._patch_status(
            pvc_path,
            rv,
            {"allocatedResourceStatuses": {"storage": NODE_RESIZE_IN_PROGRESS}},
        )
        try:
            await self._node_expand(pod, vol, target, int(parse_quantity(new_size)))
        except VolumeError as err:
            cond = {
                "type": NODE_RESIZE_ERROR,
                "status": "True",
                "lastTransitionTime": _now(),
                "message": f"failed to expand pvc with {err}",
            }
            kept = [c for c in status.get("conditions") or [] if c.get("type") != NODE_RESIZE_ERROR]
            await self._patch_status(pvc_path, None, {"conditions": [*kept, cond]})
            raise
        kept = [
            c for c in status.get("conditions") or [] if c.get("type") not in _RESIZE_CONDITIONS
        ]
        await self._patch_status(
            pvc_path,
            (pvc.get("metadata") or {}).get("resourceVersion"),
            {
                "capacity": {"storage": new_size},
                "allocatedResourceStatuses": {"storage": None},
                "conditions": kept,
            },
        )
        msg = f'MountVolume.NodeExpandVolume succeeded for volume "{vol.pv_name}"'
        log.info("%s (%s/%s, %s)", msg, ns, name, new_size)
        if self.recorder is not None:
            self.recorder.event(object_ref(pod), "Normal", "FileSystemResizeSuccessful", msg)

    async def _node_expand(self, pod: Pod, vol: CSIVolume, target: str, size: int) -> None:
        client = self.drivers.client(vol.driver)
        caps = await client.node_capabilities()
        if EXPAND_VOLUME not in caps:
            raise VolumeError(f"NodeExpandVolume is not supported by the CSI driver {vol.driver}")
        staging = ""
        if STAGE_UNSTAGE in caps:
            staging = paths.device_mount_path(self.root_dir, vol.driver, vol.handle)
        req = pb.NodeExpandVolumeRequest(
            volume_id=vol.handle,
            volume_path=target,
            capacity_range=pb.CapacityRange(required_bytes=size),
            staging_target_path=staging,
            volume_capability=requests.capability(vol, SINGLE_NODE_MULTI_WRITER in caps),
            secrets=await requests.secrets(self.client, vol.expand_secret, "NodeExpandSecretRef"),
        )
        await client.node_expand(req)

    async def _patch_status(
        self, path: str, resource_version: str | None, status: dict[str, Any]
    ) -> PersistentVolumeClaim:
        assert self.client is not None
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            claim: PersistentVolumeClaim = await self.client.patch(path + "/status", body)
            return claim
        except APIError as err:
            raise VolumeError(f"updating the claim's status failed: {err.message}") from err


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
