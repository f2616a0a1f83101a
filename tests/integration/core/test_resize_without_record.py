"""In-place resize of a pod that ran before the kubelet kept a record of what
it set on each container (a kubelet upgraded from a version without the
actuated checkpoint, or that checkpoint lost): the restart decision reads what
the runtime reports the container runs with, so a resizePolicy of
RestartContainer still restarts it (issue #33). On the simulated runtime, the
pod given as the API server would (no API server needed for the runtime side)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubelet.allocation.state import ACTUATED_FILE
from kubelet.config.config import Op, PodUpdate
from kubelet.pod_workers import PodWork, UpdateType
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import SimRuntimeProc

UID = "5c1e7a2b-0000-4000-8000-000000000033"


def api_pod(memory: str, policy: str) -> Any:
    res = {"requests": {"cpu": "100m", "memory": memory},
           "limits": {"cpu": "200m", "memory": memory}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "rs-node-a",
            "namespace": "default",
            "uid": UID,
            "annotations": {"kubernetes.io/config.source": "api"},
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "infinity"],
                    "resources": res,
                    "resizePolicy": [
                        {"resourceName": "memory", "restartPolicy": policy},
                        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                    ],
                }
            ],
        },
    }


def status(n: InProcessKubelet) -> Any:
    st = n.kubelet.status_manager.get(UID) or {}
    return {c["name"]: c for c in st.get("containerStatuses") or []}["c"]


async def _run_then_lose_the_record(sim_endpoint: str, tmp_path: Path, policy: str) -> str:
    async with in_process_kubelet(sim_endpoint, tmp_path) as n:
        n.kubelet.handle_update(PodUpdate(Op.ADD, [api_pod("64Mi", policy)], "api"))
        await n.wait(lambda: "running" in status(n)["state"], what="running")
        cid: str = status(n)["containerID"]
    # The kubelet stops (its containers go on); the record is gone when it is back.
    (found,) = (tmp_path / "root").rglob(ACTUATED_FILE)
    found.unlink()
    return cid


async def _back_resized(sim_endpoint: str, tmp_path: Path, policy: str) -> dict[str, Any]:
    """The kubelet comes back to a spec resized while it was down: the sync
    that takes the new allocation has no record to compare with."""
    async with in_process_kubelet(sim_endpoint, tmp_path) as n:
        n.kubelet.handle_update(PodUpdate(Op.ADD, [api_pod("128Mi", policy)], "api"))
        await n.wait(lambda: _limit(n) == "128Mi" and "running" in status(n)["state"],
                     what="resized")  # fmt: skip
        return copy.deepcopy(status(n))


def _limit(n: InProcessKubelet) -> str | None:
    limit: str | None = (status(n).get("resources") or {}).get("limits", {}).get("memory")
    return limit


async def test_restart_container_policy_restarts_without_an_actuated_record(
    simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    first = await _run_then_lose_the_record(simruntime.endpoint, tmp_path, "RestartContainer")
    st = await _back_resized(simruntime.endpoint, tmp_path, "RestartContainer")
    assert st["containerID"] != first and st["restartCount"] == 1


async def test_not_required_still_resizes_in_place_without_an_actuated_record(
    simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    first = await _run_then_lose_the_record(simruntime.endpoint, tmp_path, "NotRequired")
    st = await _back_resized(simruntime.endpoint, tmp_path, "NotRequired")
    assert st["containerID"] == first and st["restartCount"] == 0


async def test_a_container_at_its_allocation_is_adopted_then_restarts_for_a_resize(
    simruntime: SimRuntimeProc, tmp_path: Path
) -> None:
    """Back with the same spec: the runtime's values are recorded as what the
    container runs with (no resize shown in progress, nothing done to it);
    a later resize with RestartContainer then restarts it."""
    first = await _run_then_lose_the_record(simruntime.endpoint, tmp_path, "RestartContainer")
    async with in_process_kubelet(simruntime.endpoint, tmp_path) as n:
        n.kubelet.handle_update(PodUpdate(Op.ADD, [api_pod("64Mi", "RestartContainer")], "api"))
        alloc = n.kubelet.pods.allocation
        await n.wait(lambda: alloc.get_actuated(UID, "c") is not None, what="adopted")
        assert (alloc.get_actuated(UID, "c") or {}).get("limits", {}).get("memory") == "64Mi"

        def resizing() -> bool:
            conds = (n.kubelet.status_manager.get(UID) or {}).get("conditions") or []
            return "PodResizeInProgress" in {c["type"] for c in conds}

        # The sync before the record existed may show one (as upstream's, whose
        # missing record reads as zero); the next status has none.
        n.kubelet.pod_workers.update_pod(
            PodWork(api_pod("64Mi", "RestartContainer"), UpdateType.SYNC)
        )
        await n.wait(lambda: not resizing(), what="no resize in progress")
        assert status(n)["containerID"] == first
        n.kubelet.handle_update(PodUpdate(Op.UPDATE, [api_pod("128Mi", "RestartContainer")], "api"))
        await n.wait(lambda: _limit(n) == "128Mi" and "running" in status(n)["state"],
                     what="resized")  # fmt: skip
        assert status(n)["containerID"] != first and status(n)["restartCount"] == 1
