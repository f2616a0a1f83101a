"""Node-side expansion of a CSI volume in use (NodeExpander upstream).

When a claim's PV has grown (the resizer ran ControllerExpandVolume and set
the PV's capacity above the claim's `status.capacity`), the kubelet calls
NodeExpandVolume on the volume and records the new capacity in the claim's
status. With a resizer that sets `status.allocatedResources` (every one of
v1.34), the size asked for is the allocated one and the kubelet acts only
while `allocatedResourceStatuses.storage` is `NodeResizePending` (or
`NodeResizeInProgress`, after a restart), marking it in progress first and
clearing it when done; a failure is a `NodeResizeError` condition (and
`NodeResizeInfeasible` when the driver says the size cannot be had). An older
resizer (no allocated size) gets the PV's size and only the capacity update.

A filesystem volume is expanded at its publish dir, a raw block volume at its
publish file (the device); both with the staging path when the driver
stages. Checked when a volume is set up and on each remount.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import grpc

from kubelet.client.rest import API_ERRORS, APIClient, APIError
from kubelet.events import Recorder
from kubelet.types import (
    ObjectReference,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    ResourceList,
    object_ref,
)
from kubelet.util.gotime import meta_now
from kubelet.util.quantity import parse_quantity
from kubelet.volume import VolumeError
from kubelet.volume.csi import paths, requests
from kubelet.volume.csi.api import csi_pb2 as pb
from kubelet.volume.csi.client import (
    EXPAND_VOLUME,
    SINGLE_NODE_MULTI_WRITER,
    STAGE_UNSTAGE,
    CSIError,
)
from kubelet.volume.csi.drivers import DriversStore
from kubelet.volume.csi.source import CSIVolume

log = logging.getLogger(__name__)

NODE_RESIZE_PENDING = "NodeResizePending"
NODE_RESIZE_IN_PROGRESS = "NodeResizeInProgress"
NODE_RESIZE_INFEASIBLE = "NodeResizeInfeasible"
NODE_RESIZE_ERROR = "NodeResizeError"
# The resize conditions (knownResizeConditions upstream): a finished
# expansion clears them all, a failure replaces only NodeResizeError.
_RESIZE_CONDITIONS = {
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    NODE_RESIZE_ERROR,
}
# An in-use expansion's failure is this event on the pod (a remount's), not FailedMount.
VOLUME_RESIZE_FAILED = "VolumeResizeFailed"
# What a failure's event names (`<operation> failed for volume "pv" : ...`).
_OPERATION = "NodeExpandVolume.NodeExpandVolume"
# Final errors that say the size asked for cannot be had at all.
_INFEASIBLE = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.NOT_FOUND,
}


def _storage(obj: ResourceList | None) -> str:
    return str((obj or {}).get("storage") or "0")


# On a claim: its driver needs no node step (NodeExpansionNotRequired upstream).
NODE_EXPANSION_NOT_REQUIRED = "volume.kubernetes.io/node-expansion-not-required"


@dataclass(frozen=True)
class Resize:
    """What a node expansion of one claim is to do (None: nothing)."""

    size: str  # the size to ask the driver for
    recovery: bool  # the resizer tracks allocatedResources / their status
    status: str  # allocatedResourceStatuses.storage
    # The claim already records the size (another node of a ReadWriteMany
    # volume finished): only this node grows its view, the claim is not written.
    claim_done: bool = False


def node_resize(
    pvc: PersistentVolumeClaim, pv: PersistentVolume, node_size: int | None = None
) -> Resize | None:
    """Whether the claim's volume is to be grown on the node, and to what
    (expandVolumeDuringMount and the NodeExpander's pre-check upstream);
    `node_size` is the size this node last knew the mounted volume at."""
    status = pvc.get("status") or {}
    have = parse_quantity(_storage(status.get("capacity")))
    pv_size = _storage((pv.get("spec") or {}).get("capacity"))
    resize = str((status.get("allocatedResourceStatuses") or {}).get("storage") or "")
    if have >= parse_quantity(pv_size):
        behind = node_size is not None and node_size < parse_quantity(pv_size)
        if behind and not resize and _shared_and_node_expanded(pvc):
            return Resize(pv_size, True, "", claim_done=True)
        return None
    allocated = status.get("allocatedResources")
    if not resize and allocated is None:
        return Resize(pv_size, False, "")
    size = str((allocated or {}).get("storage") or pv_size)
    if have >= parse_quantity(size) and not resize:
        return None  # already recorded (the controller grew it all)
    return Resize(size, True, resize)


def _shared_and_node_expanded(pvc: PersistentVolumeClaim) -> bool:
    meta, spec = pvc.get("metadata") or {}, pvc.get("spec") or {}
    return "ReadWriteMany" in (spec.get("accessModes") or []) and (
        NODE_EXPANSION_NOT_REQUIRED not in (meta.get("annotations") or {})
    )


def _claim_ref(pvc: PersistentVolumeClaim) -> ObjectReference:
    meta = pvc.get("metadata") or {}
    return {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }


def _finished(err: VolumeError) -> bool:
    """False when the driver may still be working on it (a timeout, no
    answer): nothing is recorded on the claim then, the call is retried."""
    return not isinstance(err, CSIError) or err.final


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
        # (PV, size) not to be tried again on this node: the driver said it
        # cannot grow the volume while in use (FailedPrecondition), or the
        # volume is read-only (warned about once).
        self._held: set[tuple[str, str]] = set()
        # PVs whose last expansion failed for good (MarkVolumeExpansionFailedWithFinalError).
        self._failed: set[str] = set()
        # The size each published volume has on this node as far as the
        # kubelet knows (upstream's actual state of the world), by target:
        # a ReadWriteMany volume another node grew is grown here too.
        self._sizes: dict[str, int] = {}

    def forget(self, target: str) -> None:
        """The volume is no longer published at `target`."""
        self._sizes.pop(target, None)

    async def expand(
        self, pod: Pod, vol: CSIVolume, target: str, pv: PersistentVolume | None = None
    ) -> None:
        """Grow the volume published at `target` if its claim asks; `pv` is
        the PV when the caller has just read it."""
        if self.client is None or vol.claim is None or not vol.pv_name:
            return
        ns, name = vol.claim
        pvc_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
        try:
            pvc: PersistentVolumeClaim = await self.client.get(pvc_path)
            if pv is None:
                pv = await self._get_pv(vol.pv_name)
        except API_ERRORS as err:
            raise VolumeError(
                f"mountVolume.NodeExpandVolume get PVC failed : {err}", _OPERATION
            ) from err
        plan = node_resize(pvc, pv, self._sizes.get(target))
        if plan is None:
            self._sizes[target] = int(
                parse_quantity(_storage((pv.get("spec") or {}).get("capacity")))
            )
            return
        if (vol.pv_name, plan.size) in self._held:
            return
        if vol.read_only:
            self._held.add((vol.pv_name, plan.size))
            self._events(pod, pvc, "Warning", "FileSystemResizeFailed", vol.pv_name,
                         "MountVolume.NodeExpandVolume failed", "requested read-only file system")  # fmt: skip
            return
        if plan.recovery and not plan.claim_done:
            if plan.status not in (NODE_RESIZE_PENDING, NODE_RESIZE_IN_PROGRESS):
                log.info("NodeExpandVolume of %s/%s waits: resize status %r", ns, name, plan.status)
                return
            pvc = await self._patch_status(
                pvc_path,
                (pvc.get("metadata") or {}).get("resourceVersion"),
                {"allocatedResourceStatuses": {"storage": NODE_RESIZE_IN_PROGRESS}},
            )
        try:
            await self._node_expand(vol, target, int(parse_quantity(plan.size)))
        except VolumeError as err:
            await self._failure(pvc_path, pvc, vol, plan, err)
            return
        self._failed.discard(vol.pv_name)
        self._sizes[target] = int(parse_quantity(plan.size))
        self._events(pod, pvc, "Normal", "FileSystemResizeSuccessful", vol.pv_name,
                     "MountVolume.NodeExpandVolume succeeded", self._node_name(pod))  # fmt: skip
        if plan.claim_done:
            log.info("NodeExpandVolume of %s (%s) on this node: %s", name, vol.pv_name, plan.size)
            return
        done: dict[str, Any] = {"capacity": {"storage": plan.size}, "conditions": [
            c for c in (pvc.get("status") or {}).get("conditions") or []
            if c.get("type") not in _RESIZE_CONDITIONS
        ]}  # fmt: skip
        if plan.recovery:
            done["allocatedResourceStatuses"] = {"storage": None}
        await self._patch_status(pvc_path, (pvc.get("metadata") or {}).get("resourceVersion"), done)
        log.info("NodeExpandVolume of %s/%s (%s) done: %s", ns, name, vol.pv_name, plan.size)

    async def _failure(
        self, path: str, pvc: PersistentVolumeClaim, vol: CSIVolume, plan: Resize, err: VolumeError
    ) -> None:
        """Record a failed NodeExpandVolume as upstream does; raises unless the
        driver said the volume cannot be grown while in use, which must not
        keep it from being used."""
        code = err.code if isinstance(err, CSIError) else None
        in_use = code == grpc.StatusCode.FAILED_PRECONDITION
        if in_use:
            self._held.add((vol.pv_name, plan.size))
            log.error("NodeExpandVolume of %s not retried on this node: %s", vol.pv_name, err)
        if plan.recovery and _finished(err):
            asked = _storage(((pvc.get("spec") or {}).get("resources") or {}).get("requests"))
            infeasible = code in _INFEASIBLE or (
                vol.pv_name in self._failed and parse_quantity(asked) != parse_quantity(plan.size)
            )
            self._failed.add(vol.pv_name)
            cond = {"type": NODE_RESIZE_ERROR, "status": "True", "lastTransitionTime": meta_now(),
                    "message": f"failed to expand pvc with {err}"}  # fmt: skip
            kept = [c for c in (pvc.get("status") or {}).get("conditions") or []
                    if c.get("type") != NODE_RESIZE_ERROR]  # fmt: skip
            status: dict[str, Any] = {"conditions": [*kept, cond]}
            if infeasible:
                status["allocatedResourceStatuses"] = {"storage": NODE_RESIZE_INFEASIBLE}
            try:
                await self._patch_status(path, None, status)
            except VolumeError as patch_err:
                log.error("Recording the failed expansion of %s: %s", vol.pv_name, patch_err)
        if not in_use:
            raise VolumeError(str(err), _OPERATION) from err

    async def _node_expand(self, vol: CSIVolume, target: str, size: int) -> None:
        client = self.drivers.client(vol.driver)
        caps = await client.node_capabilities()
        if EXPAND_VOLUME not in caps:
            raise VolumeError(f"NodeExpand is not supported by the CSI driver {vol.driver}")
        # The staging path only to a driver that stages: the spec makes it
        # optional, and a driver that does not stage never made it.
        staging = ""
        if STAGE_UNSTAGE in caps:
            block_pv = vol.pv_name if vol.volume_mode == paths.BLOCK else ""
            staging = paths.staging_path(self.root_dir, vol.driver, vol.handle, block_pv)
        req = pb.NodeExpandVolumeRequest(
            volume_id=vol.handle,
            volume_path=target,
            capacity_range=pb.CapacityRange(required_bytes=size),
            staging_target_path=staging,
            volume_capability=requests.capability(vol, SINGLE_NODE_MULTI_WRITER in caps),
            secrets=await requests.secrets(self.client, vol.expand_secret, "NodeExpandSecretRef"),
        )
        await client.node_expand(req)

    def _events(
        self,
        pod: Pod,
        pvc: PersistentVolumeClaim,
        etype: str,
        reason: str,
        pv: str,
        what: str,
        why: str,
    ) -> None:
        # One message on the pod and the claim (GenerateMsg upstream).
        msg = f'{what} for volume "{pv}" {why}'
        (log.info if etype == "Normal" else log.warning)(
            "%s (pod %s)", msg, pod["metadata"].get("name")
        )
        if self.recorder is not None:
            self.recorder.event(object_ref(pod), etype, reason, msg)
            self.recorder.event(_claim_ref(pvc), etype, reason, msg)

    @staticmethod
    def _node_name(pod: Pod) -> str:
        return str((pod.get("spec") or {}).get("nodeName") or "")

    async def _get_pv(self, name: str) -> PersistentVolume:
        assert self.client is not None
        got: PersistentVolume = await self.client.get(f"/api/v1/persistentvolumes/{name}")
        return got

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
        except API_ERRORS as err:
            why = err.message if isinstance(err, APIError) else str(err)
            raise VolumeError(f"updating the claim's status failed: {why}", _OPERATION) from err
