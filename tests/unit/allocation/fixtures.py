"""What the allocation tests share: pods with one container, a manager over
an admitter of a given node size."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from kubelet.allocation.allocation_manager import AllocationManager, NodeLimits
from kubelet.checkpointmanager import CheckpointStore
from kubelet.lifecycle.predicate import Admitter
from kubelet.status.resize_conditions import ResizeConditions
from kubelet.types import Node, Pod

GI = 1024**3

# A node with no labels, taints or extended resources: only the fit counts.
NODE: Node = {"metadata": {"name": "n"}}


def pod(
    uid: str, cpu: str = "100m", mem: str = "64Mi", limits: bool = False, gen: int = 1, **extra: Any
) -> Pod:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}}
    if limits:
        res["limits"] = {"cpu": cpu, "memory": mem}
    p: dict[str, Any] = {
        "metadata": {"name": uid, "namespace": "default", "uid": uid, "generation": gen},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": res}]},
    }
    p["spec"].update(extra)
    return p  # type: ignore[return-value]


def manager(
    cpu_m: int = 2000, memory: int = 4 * GI, tmp: Path | None = None, **limits: Any
) -> tuple[AllocationManager, Admitter]:
    admitter = Admitter(110, cpu_m, memory)
    ticks = itertools.count()
    conds = ResizeConditions(lambda: f"2026-01-01T00:00:{next(ticks) % 60:02d}Z")
    store = CheckpointStore(str(tmp)) if tmp is not None else None
    return AllocationManager(NodeLimits(cpu_m, memory, **limits), admitter, conds, store), admitter


def admit(m: AllocationManager, a: Admitter, p: Pod) -> None:
    assert a.admit(p["metadata"]["uid"], p, NODE) is None
    m.set_allocated(p)
