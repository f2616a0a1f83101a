"""Admission's node predicates on a standalone node (the simulated runtime):
the node matched against is the one this kubelet would register, its
well-known labels and registerWithTaints; static pods are exempt from taints."""

from __future__ import annotations

from pathlib import Path

from kubelet.testing.kubelets import EventLog, in_process_kubelet

SLEEP = [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]
AFFINITY = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"


async def test_static_pods_meet_the_initial_nodes_labels_and_taints(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    events = EventLog()
    taints = [{"key": "dedicated", "value": "infra", "effect": "NoExecute"}]
    async with in_process_kubelet(simruntime.endpoint, tmp_path, recorder=events,
                                  register_with_taints=taints) as node:  # fmt: skip
        node.write("plain", SLEEP)  # untolerating, but static: exempt from the taint
        node.write("own-host", SLEEP, nodeSelector={"kubernetes.io/hostname": "node-a"})
        node.write("wants-ssd", SLEEP, nodeSelector={"disktype": "ssd"})
        node.write("elsewhere", SLEEP, affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]},
            ]}}})  # fmt: skip
        await node.wait(lambda: node.phase("wants-ssd") == "Failed" and node.phase("elsewhere") == "Failed",
                        what="the pods the node does not match refused")  # fmt: skip
        await node.wait(lambda: node.phase("plain") == node.phase("own-host") == "Running",
                        what="the others running")  # fmt: skip
        for name in ("wants-ssd", "elsewhere"):
            p = node.pod(name)
            assert p is not None
            assert p["status"]["reason"] == "NodeAffinity"
            assert p["status"]["message"] == "Pod was rejected: " + AFFINITY
            assert (f"{name}-node-a", "Warning", "NodeAffinity", AFFINITY) in events.events
