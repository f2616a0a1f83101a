"""Integer kernel parameters under /proc/sys (component-helpers node/util/sysctl),
and the values the kubelet wants of them (setupKernelTunables upstream)."""

from __future__ import annotations

import logging
import os
from enum import Enum

log = logging.getLogger(__name__)

PROC_SYS = "/proc/sys"

# What the kubelet's memory accounting and OOM handling rely on: overcommit
# always (the kubelet, not the allocator, decides what fits), the OOM killer
# rather than a panic, reboot 10 s after a panic, panic on an oops, and key
# quotas large enough for one session keyring per container.
DESIRED_KERNEL_TUNABLES: tuple[tuple[str, int], ...] = (
    ("vm/overcommit_memory", 1),
    ("vm/panic_on_oom", 0),
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    ("kernel/keys/root_maxkeys", 1000000),
    ("kernel/keys/root_maxbytes", 25000000),
)


class Sysctl:
    def __init__(self, root: str = PROC_SYS) -> None:
        self.root = root

    def get(self, name: str) -> int:
        """Raises OSError or ValueError."""
        with open(os.path.join(self.root, name)) as fh:
            return int(fh.read().strip())

    def set(self, name: str, value: int) -> None:
        with open(os.path.join(self.root, name), "w") as fh:
            fh.write(str(value))


class KernelTunableBehavior(Enum):
    ERROR = "error"  # protectKernelDefaults: a difference is fatal
    MODIFY = "modify"  # otherwise the kubelet sets them


def setup_kernel_tunables(
    sysctl: Sysctl, behavior: KernelTunableBehavior, tolerate_set_failure: bool = False
) -> list[str]:
    """Check (or set) every desired tunable; the problems, all of them.
    `tolerate_set_failure` (KubeletInUserNamespace inside a user namespace)
    turns a refused write into a log line."""
    problems: list[str] = []
    for name, want in DESIRED_KERNEL_TUNABLES:
        try:
            have = sysctl.get(name)
        except (OSError, ValueError) as err:
            problems.append(f"reading {os.path.join(sysctl.root, name)}: {err}")
            continue
        if have == want:
            continue
        if behavior is KernelTunableBehavior.ERROR:
            problems.append(
                f"invalid kernel flag: {name}, expected value: {want}, actual value: {have}"
            )
            continue
        log.info("Updating kernel flag %s from %d to %d", name, have, want)
        try:
            sysctl.set(name, want)
        except OSError as err:
            if tolerate_set_failure:
                log.info("Updating kernel flag %s failed (user namespace, ignored): %s", name, err)
                continue
            problems.append(f"setting kernel flag {name} to {want}: {err}")
    return problems
