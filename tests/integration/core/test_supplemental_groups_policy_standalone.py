"""SupplementalGroupsPolicy on a standalone node (the simulated runtime, a real
process): a runtime that supports the policy runs a Strict pod and reports the
user its container runs as; one that does not (as containerd 1.6) gets the
Strict pod refused with upstream's reason, and a Merge pod still runs."""

from __future__ import annotations

from pathlib import Path

from kubelet.testing.kubelets import EventLog, in_process_kubelet
from kubelet.testing.simruntime import start_simruntime

SLEEP = [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]
MESSAGE = "SupplementalGroupsPolicy=Strict is not supported in this node"


def security(policy: str) -> dict:
    return {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000],
            "supplementalGroupsPolicy": policy}  # fmt: skip


async def test_a_runtime_with_the_policy_runs_strict_pods_and_reports_the_user(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    async with in_process_kubelet(simruntime.endpoint, tmp_path) as node:
        node.write("strict", SLEEP, securityContext=security("Strict"))
        await node.wait(lambda: node.phase("strict") == "Running", what="strict running")
        await node.wait(lambda: node.pod("strict")["status"]["containerStatuses"][0]["user"],
                        what="the user reported")  # fmt: skip
        cs = node.pod("strict")["status"]["containerStatuses"][0]  # type: ignore[index]
        assert cs["user"] == {
            "linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [3000, 4000]}
        }


async def test_a_runtime_without_the_policy_refuses_strict_pods(tmp_path: Path) -> None:
    sim = start_simruntime(None, "--supplemental-groups-policy=unsupported")
    events = EventLog()
    try:
        async with in_process_kubelet(sim.endpoint, tmp_path, recorder=events) as node:
            node.write("strict", SLEEP, securityContext=security("Strict"))
            node.write("merge", SLEEP, securityContext=security("Merge"))
            await node.wait(lambda: node.phase("strict") == "Failed", what="strict refused")
            await node.wait(lambda: node.phase("merge") == "Running", what="merge running")
            st = node.pod("strict")["status"]  # type: ignore[index]
            assert st["reason"] == "SupplementalGroupsPolicyNotSupported"
            assert st["message"] == "Pod was rejected: " + MESSAGE
            assert (
                "strict-node-a",
                "Warning",
                "SupplementalGroupsPolicyNotSupported",
                MESSAGE,
            ) in events.events
            # a runtime that reports no user: the status has none
            assert "user" not in node.pod("merge")["status"]["containerStatuses"][0]  # type: ignore[index]
    finally:
        sim.stop()
