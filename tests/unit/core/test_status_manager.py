"""The status manager's API side with a recording client: patches only what differs,
skips pods already in sync, re-patches when the API copy drifts, deletes a
terminated pod that is being deleted."""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.status.status_manager import StatusManager


class FakeClient:
    def __init__(self, api: dict[str, dict[str, Any]]) -> None:
        self.api = api
        self.calls: list[tuple[str, str, Any]] = []
        self.rv = 10

    async def patch(self, path: str, body: Any, content_type: str = "") -> Any:
        self.calls.append(("PATCH", path, body))
        self.rv += 1
        name = path.split("/")[-2]
        pod = self.api[name]
        st = dict(pod["status"], **body["status"])
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": st}

    async def delete(self, path: str, options: Any = None) -> Any:
        self.calls.append(("DELETE", path, options))
        return {}


def api_pod(name: str, rv: str, status: dict[str, Any], **md: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "resourceVersion": rv, **md},
        "spec": {},
        "status": status,
    }  # fmt: skip


async def test_patch_once_skip_in_sync_repatch_on_drift_and_delete() -> None:
    api = {"a": api_pod("a", "1", {"phase": "Pending"})}
    client = FakeClient(api)
    deletable = {"uid-a": False}
    sm = StatusManager(
        client,
        api_pod=lambda u: api.get(u.removeprefix("uid-")),
        desired_pod=lambda u: api.get(u.removeprefix("uid-")),
        can_delete=lambda u: deletable[u],
    )
    stop = asyncio.Event()
    task = asyncio.create_task(sm.run(stop))
    try:
        sm.set_pod_status("uid-a", {"phase": "Running", "podIP": "10.0.0.5"})
        for _ in range(50):
            await asyncio.sleep(0.01)
            if client.calls:
                break
        assert client.calls == [
            (
                "PATCH",
                "/api/v1/namespaces/ns/pods/a/status",
                {"metadata": {"uid": "uid-a"}, "status": {"phase": "Running", "podIP": "10.0.0.5"}},
            )
        ]
        api["a"]["status"] = {"phase": "Running", "podIP": "10.0.0.5"}
        sm.reconcile()
        await asyncio.sleep(0.05)
        assert len(client.calls) == 1  # in sync: nothing sent
        # Someone else's write (a new resourceVersion) drops the pod IP: put it back.
        api["a"] = api_pod("a", "99", {"phase": "Running"})
        sm.reconcile()
        await asyncio.sleep(0.05)
        assert client.calls[-1][2]["status"] == {"podIP": "10.0.0.5"}
        # Being deleted: nothing until its containers are stopped, then grace 0 + UID.
        api["a"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        sm.set_pod_status("uid-a", {"phase": "Failed", "podIP": "10.0.0.5"})
        await asyncio.sleep(0.05)
        assert all(c[0] == "PATCH" for c in client.calls)
        deletable["uid-a"] = True
        sm.enqueue("uid-a")
        await asyncio.sleep(0.05)
        assert client.calls[-1] == (
            "DELETE",
            "/api/v1/namespaces/ns/pods/a",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
             "preconditions": {"uid": "uid-a"}},
        )  # fmt: skip
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_status_sync_duration_and_the_status_set_hook() -> None:
    """kubelet_pod_status_sync_duration_seconds: once per change the API took,
    from the first change it answers; every new status reaches the hook."""
    from kubelet import metrics

    def count() -> float:
        h = metrics.POD_STATUS_SYNC_DURATION
        return next(s.value for s in h.collect()[0].samples if s.name.endswith("_count"))

    api = {"b": api_pod("b", "1", {"phase": "Pending"})}
    client = FakeClient(api)
    told: list[tuple[str, str]] = []
    sm = StatusManager(
        client,
        api_pod=lambda u: api.get(u.removeprefix("uid-")),
        desired_pod=lambda u: api.get(u.removeprefix("uid-")),
        on_status_set=lambda u, st: told.append((u, st["phase"])),
    )
    n0 = count()
    # Two changes before the writer runs: one write, one observation.
    sm.set_pod_status("uid-b", {"phase": "Pending", "podIP": "10.0.0.6"})
    sm.set_pod_status("uid-b", {"phase": "Running", "podIP": "10.0.0.6"})
    assert not sm.set_pod_status("uid-b", {"phase": "Running", "podIP": "10.0.0.6"})
    stop = asyncio.Event()
    task = asyncio.create_task(sm.run(stop))
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if client.calls:
                break
        await asyncio.sleep(0.02)
        assert len(client.calls) == 1 and count() == n0 + 1
        assert told == [("uid-b", "Pending"), ("uid-b", "Running")]
    finally:
        stop.set()
        await task


async def test_a_terminal_phase_waits_until_the_containers_have_stopped() -> None:
    """mergePodStatus: a preempted pod is Failed in the kubelet at once, but the
    API keeps Running (and no DisruptionTarget) while its containers may run;
    once they stopped, the status generated from their exit codes is sent."""
    api = {"a": api_pod("a", "1", {"phase": "Running", "conditions": []})}
    client = FakeClient(api)
    running = {"uid-a": True}
    sm = StatusManager(
        client,
        api_pod=lambda u: api.get(u.removeprefix("uid-")),
        desired_pod=lambda u: api.get(u.removeprefix("uid-")),
        could_run=lambda u: running[u],
    )
    stop = asyncio.Event()
    task = asyncio.create_task(sm.run(stop))

    async def patched(n: int) -> dict[str, Any]:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(client.calls) >= n:
                break
        assert len(client.calls) == n
        return dict(client.calls[-1][2]["status"])

    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    try:
        sm.set_pod_status("uid-a", {
            "phase": "Failed", "reason": "Preempting", "message": "Preempted",
            "podIP": "10.0.0.5", "conditions": [disruption],
        })  # fmt: skip
        held = await patched(1)
        assert "phase" not in held and "reason" not in held and "conditions" not in held
        assert held["podIP"] == "10.0.0.5"
        api["a"]["status"].update(held)
        # The containers exited 0 on SIGTERM: the final status is Succeeded.
        running["uid-a"] = False
        sm.set_pod_status("uid-a", {
            "phase": "Succeeded", "podIP": "10.0.0.5", "conditions": [disruption],
        })  # fmt: skip
        final = await patched(2)
        assert final["phase"] == "Succeeded"
        assert [c["type"] for c in final["conditions"]] == ["DisruptionTarget"]
    finally:
        stop.set()
        await task


async def test_a_held_terminal_phase_is_sent_by_the_reconcile() -> None:
    """Nothing sets the status again once the pod can no longer run (its DRA
    claims unprepared by their own loop after a restart): the reconcile finds
    the API short of the terminal phase and sends it, as upstream's syncBatch."""
    api = {"a": api_pod("a", "1", {"phase": "Running", "conditions": []})}
    client = FakeClient(api)
    running = {"uid-a": True}
    sm = StatusManager(
        client,
        api_pod=lambda u: api.get(u.removeprefix("uid-")),
        desired_pod=lambda u: api.get(u.removeprefix("uid-")),
        could_run=lambda u: running[u],
    )
    stop = asyncio.Event()
    task = asyncio.create_task(sm.run(stop))
    try:
        sm.set_pod_status("uid-a", {"phase": "Succeeded", "podIP": "10.0.0.5"})
        for _ in range(100):
            await asyncio.sleep(0.01)
            if client.calls:
                break
        assert len(client.calls) == 1 and "phase" not in client.calls[0][2]["status"]
        api["a"]["status"].update(client.calls[0][2]["status"])
        sm.reconcile()  # still could run: the patch would be empty, nothing is sent
        await asyncio.sleep(0.1)
        assert len(client.calls) == 1
        running["uid-a"] = False
        sm.reconcile()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(client.calls) == 2:
                break
        assert client.calls[-1][2]["status"]["phase"] == "Succeeded"
    finally:
        stop.set()
        await task
