"""The CSI Node and Identity services over a driver's Unix socket
(csi_client.go upstream), on grpc.aio.

Errors keep gRPC's code: `final` says the driver certainly is not still
working on the request (isFinalError upstream). A set-up that failed with a
non-final error (a timeout, the driver restarting) may have mounted anyway,
and is cleaned up like one that succeeded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc import aio

from kubelet.util.grpcopts import OWN_CONNECTIONS
from kubelet.volume import VolumeError
from kubelet.volume.csi.api import csi_pb2 as pb
from kubelet.volume.csi.api import csi_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

# csiTimeout upstream: each call's deadline.
CSI_TIMEOUT = 120.0

NodeCap = pb.NodeServiceCapability.RPC
STAGE_UNSTAGE = NodeCap.STAGE_UNSTAGE_VOLUME
GET_VOLUME_STATS = NodeCap.GET_VOLUME_STATS
EXPAND_VOLUME = NodeCap.EXPAND_VOLUME
VOLUME_CONDITION = NodeCap.VOLUME_CONDITION
SINGLE_NODE_MULTI_WRITER = NodeCap.SINGLE_NODE_MULTI_WRITER
VOLUME_MOUNT_GROUP = NodeCap.VOLUME_MOUNT_GROUP

_NOT_FINAL = {
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
}


class CSIError(VolumeError):
    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.final = code is not None and code not in _NOT_FINAL


def _go_code(code: grpc.StatusCode) -> str:
    # As Go prints codes.Code: NOT_FOUND -> NotFound.
    return "".join(w.capitalize() for w in code.name.split("_"))


def rpc_error(err: aio.AioRpcError) -> CSIError:
    """A failed call as upstream's message reads: rpc error: code = X desc = Y."""
    return CSIError(f"rpc error: code = {_go_code(err.code())} desc = {err.details()}", err.code())


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    max_volumes_per_node: int
    topology: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VolumeStats:
    """NodeGetVolumeStats, as /stats/summary reports a volume."""

    capacity_bytes: int | None
    used_bytes: int | None
    available_bytes: int | None
    inodes: int | None
    inodes_used: int | None
    inodes_free: int | None
    abnormal: bool | None = None  # None: the driver reports no condition
    message: str = ""


class CSIClient:
    """One driver's services; capabilities are asked once per registration."""

    def __init__(self, driver: str, endpoint: str, timeout: float = CSI_TIMEOUT) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.timeout = timeout
        target = endpoint if endpoint.startswith("unix:") else "unix://" + endpoint
        self.channel = aio.insecure_channel(
            target, options=[("grpc.enable_retries", 0), OWN_CONNECTIONS]
        )
        self._node = pb_grpc.NodeStub(self.channel)
        self._identity = pb_grpc.IdentityStub(self.channel)
        self._caps: frozenset[int] | None = None

    async def close(self) -> None:
        await self.channel.close()

    async def _call(self, method: Any, req: Any, timeout: float | None = None) -> Any:
        try:
            return await method(req, timeout=timeout or self.timeout)
        except aio.AioRpcError as err:
            raise rpc_error(err) from err

    async def node_get_info(self, timeout: float | None = None) -> NodeInfo:
        r = await self._call(self._node.NodeGetInfo, pb.NodeGetInfoRequest(), timeout)
        return NodeInfo(r.node_id, r.max_volumes_per_node, dict(r.accessible_topology.segments))

    async def node_capabilities(self) -> frozenset[int]:
        if self._caps is None:
            r = await self._call(self._node.NodeGetCapabilities, pb.NodeGetCapabilitiesRequest())
            self._caps = frozenset(c.rpc.type for c in r.capabilities if c.HasField("rpc"))
        return self._caps

    async def supports(self, cap: int) -> bool:
        return cap in await self.node_capabilities()

    async def node_stage(self, req: pb.NodeStageVolumeRequest) -> None:
        await self._call(self._node.NodeStageVolume, req)

    async def node_unstage(self, volume_id: str, staging_path: str) -> None:
        req = pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=staging_path)
        await self._call(self._node.NodeUnstageVolume, req)

    async def node_publish(self, req: pb.NodePublishVolumeRequest) -> None:
        await self._call(self._node.NodePublishVolume, req)

    async def node_unpublish(self, volume_id: str, target_path: str) -> None:
        req = pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target_path)
        await self._call(self._node.NodeUnpublishVolume, req)

    async def node_expand(self, req: pb.NodeExpandVolumeRequest) -> int:
        r = await self._call(self._node.NodeExpandVolume, req)
        return int(r.capacity_bytes)

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, staging_path: str = ""
    ) -> VolumeStats:
        req = pb.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=volume_path, staging_target_path=staging_path
        )
        r = await self._call(self._node.NodeGetVolumeStats, req)
        return stats_from_response(r, VOLUME_CONDITION in await self.node_capabilities())


def stats_from_response(r: pb.NodeGetVolumeStatsResponse, with_condition: bool) -> VolumeStats:
    """The usage entries by unit (a driver may leave either out)."""
    by_unit = {u.unit: u for u in r.usage}
    b = by_unit.get(pb.VolumeUsage.BYTES)
    i = by_unit.get(pb.VolumeUsage.INODES)
    cond = r.volume_condition if with_condition and r.HasField("volume_condition") else None
    return VolumeStats(
        capacity_bytes=b.total if b else None,
        used_bytes=b.used if b else None,
        available_bytes=b.available if b else None,
        inodes=i.total if i else None,
        inodes_used=i.used if i else None,
        inodes_free=i.available if i else None,
        abnormal=cond.abnormal if cond is not None else None,
        message=cond.message if cond is not None else "",
    )
