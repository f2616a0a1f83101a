"""Is swap on? (pkg/kubelet/util/swap upstream): /proc/swaps lists a device
below its header line."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

PROC_SWAPS = "/proc/swaps"


def is_swap_on(proc_swaps: str = PROC_SWAPS) -> bool:
    """True when `proc_swaps` names a swap area; a missing file means no swap,
    as upstream. Raises OSError when it exists but cannot be read."""
    try:
        with open(proc_swaps) as fh:
            lines = fh.read().strip().splitlines()
    except FileNotFoundError:
        log.info("%s does not exist, assuming that swap is disabled", proc_swaps)
        return False
    if len(lines) > 1:
        log.info("Swap is on: %s", " | ".join(lines[1:]))
        return True
    return False
