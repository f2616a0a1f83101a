"""Process OOM score adjustment (pkg/util/oom)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class OOMAdjuster:
    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root

    def apply_oom_score_adj(self, pid: int | str, value: int) -> None:
        """Write oom_score_adj; raises OSError (EPERM/EACCES where not allowed)."""
        if not -1000 <= value <= 1000:
            raise ValueError(f"invalid value({value}) specified for oom_score_adj")
        with open(f"{self.proc_root}/{pid}/oom_score_adj", "w") as fh:
            fh.write(str(value))


def adjust_self(adjuster: OOMAdjuster, value: int) -> bool:
    """Set this process's score. Machines without CAP_SYS_RESOURCE refuse negative
    values; that is a warning, not a failure, as for the Go kubelet."""
    try:
        adjuster.apply_oom_score_adj("self", value)
        return True
    except PermissionError as err:
        log.warning("Failed to set the kubelet's oom_score_adj to %d: %s", value, err)
    except OSError as err:
        log.warning("Failed to set the kubelet's oom_score_adj to %d: %s", value, err)
    return False
