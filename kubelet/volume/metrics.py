"""What a volume's usage is, as the summary API reports it (volume.Metrics
upstream): measured by the kubelet's walk or asked of the volume's driver."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Histogram

from kubelet.metrics import DEF_BUCKETS, REGISTRY

# Each measuring of one volume's usage, by how: "du" (the walk of a volume in the
# pod's dir) or the CSI driver's name (its NodeGetVolumeStats), as upstream.
VOLUME_METRIC_COLLECTION_DURATION = Histogram(
    "kubelet_volume_metric_collection_duration_seconds",
    "Seconds spent measuring one volume's usage, by the way it was measured.",
    ["metric_source"],
    buckets=DEF_BUCKETS,
    registry=REGISTRY,
)
DU_DURATION = VOLUME_METRIC_COLLECTION_DURATION.labels("du")


@dataclass(frozen=True)
class VolumeUsage:
    name: str
    used_bytes: int
    inodes_used: int
    capacity_bytes: int
    available_bytes: int
    inodes: int
    inodes_free: int
    # A claim's volume: the claim (namespace, name), as summary's pvcRef.
    pvc_ref: tuple[str, str] | None = None
    # What the volume's driver says of its health (None: nothing said).
    abnormal: bool | None = None

    def to_api(self, time: str) -> dict[str, object]:
        out: dict[str, object] = {
            "time": time,
            "name": self.name,
            "usedBytes": self.used_bytes,
            "inodesUsed": self.inodes_used,
            "capacityBytes": self.capacity_bytes,
            "availableBytes": self.available_bytes,
            "inodes": self.inodes,
            "inodesFree": self.inodes_free,
        }
        if self.pvc_ref is not None:
            out["pvcRef"] = {"namespace": self.pvc_ref[0], "name": self.pvc_ref[1]}
        if self.abnormal is not None:
            out["volumeHealthStats"] = {"abnormal": self.abnormal}
        return out
