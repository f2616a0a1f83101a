"""The volume manager's metrics by upstream's names (volumemanager/metrics and
the orphaned pod gauges of pkg/kubelet/metrics), in the kubelet's registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from kubelet.metrics import REGISTRY

RECONSTRUCT_VOLUME_OPERATIONS = Counter(
    "reconstruct_volume_operations_total",
    "Volume dirs found on disk at start-up that the volume manager tried to take "
    "back into its actual state, failed ones included.",
    registry=REGISTRY,
)
RECONSTRUCT_VOLUME_OPERATIONS_ERRORS = Counter(
    "reconstruct_volume_operations_errors_total",
    "Volume dirs found on disk at start-up whose volume plugin this kubelet does not have.",
    registry=REGISTRY,
)
FORCE_CLEANED_FAILED_VOLUME_OPERATIONS = Counter(
    "force_cleaned_failed_volume_operations_total",
    "Tear-downs of volume dirs that failed reconstruction at start-up and no pod "
    "wants, failed ones included.",
    registry=REGISTRY,
)
FORCE_CLEANED_FAILED_VOLUME_OPERATION_ERRORS = Counter(
    "force_cleaned_failed_volume_operation_errors_total",
    "Tear-downs of volume dirs that failed reconstruction at start-up that failed.",
    registry=REGISTRY,
)
ORPHAN_POD_CLEANED_VOLUMES = Gauge(
    "kubelet_orphan_pod_cleaned_volumes",
    "Pod dirs on disk of pods the kubelet no longer knows, found by the last housekeeping sweep.",
    registry=REGISTRY,
)
ORPHAN_POD_CLEANED_VOLUMES_ERRORS = Gauge(
    "kubelet_orphan_pod_cleaned_volumes_errors",
    "Of those, the pod dirs the last sweep could not remove (volumes not yet torn "
    "down, or the removal failed).",
    registry=REGISTRY,
)


def orphan_sweep(orphaned: int, removable: int) -> None:
    """The gauges after one housekeeping sweep: `orphaned` pod dirs of unknown
    pods on disk, `removable` of them with no volume left (the kubelet adds the
    removals that then fail)."""
    ORPHAN_POD_CLEANED_VOLUMES.set(orphaned)
    ORPHAN_POD_CLEANED_VOLUMES_ERRORS.set(orphaned - removable)


class FailedReconstructions:
    """Volume dirs found at start-up that could not be reconstructed, until their
    first (forced) tear-down: upstream counts the attempts and that one clean-up."""

    def __init__(self) -> None:
        self.keys: set[tuple[str, str, str]] = set()  # (pod UID, plugin name, dir name)

    def found(self, key: tuple[str, str, str], reconstructed: bool) -> None:
        RECONSTRUCT_VOLUME_OPERATIONS.inc()
        if not reconstructed:
            RECONSTRUCT_VOLUME_OPERATIONS_ERRORS.inc()
            self.keys.add(key)

    def tear_down_started(self, key: tuple[str, str, str]) -> bool:
        """True (and counted) for the first tear-down of a failed one."""
        if key not in self.keys:
            return False
        self.keys.discard(key)
        FORCE_CLEANED_FAILED_VOLUME_OPERATIONS.inc()
        return True


def force_clean_failed() -> None:
    FORCE_CLEANED_FAILED_VOLUME_OPERATION_ERRORS.inc()
