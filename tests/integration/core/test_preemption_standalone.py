"""Critical pod preemption on a standalone node (the simulated runtime): a node
with 600m of allocatable cpu and room for four pods, full of static pods of
priority 0; critical static pods of system-node-critical priority arrive and
the kubelet evicts the pods upstream's algorithm picks, then runs them."""

from __future__ import annotations

from pathlib import Path

from kubelet.cri.api import api_pb2 as pb
from kubelet.testing.kubelets import EventLog, InProcessKubelet, in_process_kubelet

NODE_CRITICAL = 2_000_001_000
MESSAGE = "Preempted in order to admit critical pod"


def sleeper(cpu: str | None = None, guaranteed: bool = False, stubborn: bool = False) -> list[dict]:
    cmd = ["sh", "-c", "trap '' TERM; sleep 3600"] if stubborn else ["sleep", "3600"]
    c: dict = {"name": "c", "image": "busybox", "command": cmd}
    if cpu:
        req = {"cpu": cpu, "memory": "64Mi"}
        c["resources"] = {"requests": req, **({"limits": dict(req)} if guaranteed else {})}
    return [c]


async def test_critical_static_pods_preempt_the_least_disruptive_pods(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    events = EventLog()
    allocatable = {"cpu": "600m", "memory": "4Gi", "pods": "4"}
    async with in_process_kubelet(simruntime.endpoint, tmp_path, recorder=events,
                                  allocatable=allocatable) as node:  # fmt: skip
        node.write("be", sleeper(), priority=0)
        node.write("small", sleeper("100m"), priority=0)
        # Ignores SIGTERM: it takes its whole 3 s grace period to stop.
        node.write(
            "big", sleeper("300m", stubborn=True), priority=0, terminationGracePeriodSeconds=3
        )
        node.write("guar", sleeper("100m", guaranteed=True), priority=0)
        running = ("be", "small", "big", "guar")
        await node.wait(lambda: all(node.phase(n) == "Running" for n in running),
                        what="the four pods running")  # fmt: skip
        # Short of a pod slot and 150m of cpu: the one Burstable pod that
        # frees both goes (BestEffort frees no cpu, Guaranteed goes last).
        node.write("crit", sleeper("250m"), priority=NODE_CRITICAL)
        # As upstream (admission blocks until the victim is killed), crit's
        # container is created only once big's has stopped.
        await node.wait(lambda: containers(node, "crit-node-a"), what="crit's container")
        assert [c.state for c in await containers(node, "big-node-a")] == [pb.CONTAINER_EXITED]
        await node.wait(lambda: node.phase("crit") == "Running", what="crit running")
        await node.wait(lambda: node.phase("big") == "Failed", what="big preempted")
        # Short of a pod slot alone: the BestEffort pod goes.
        node.write("crit2", sleeper(), priority=NODE_CRITICAL)
        await node.wait(lambda: node.phase("crit2") == "Running", what="crit2 running")
        await node.wait(lambda: node.phase("be") == "Failed", what="be preempted")
        for n in ("small", "guar", "crit"):
            assert node.phase(n) == "Running", n
        for n in ("big", "be"):
            p = node.pod(n)
            assert p is not None
            st = p["status"]
            assert (st["reason"], st["message"]) == ("Preempting", MESSAGE)
            cond = next(c for c in st["conditions"] if c["type"] == "DisruptionTarget")
            assert (cond["status"], cond["reason"]) == ("True", "TerminationByKubelet")
            assert cond["message"] == "Pod was preempted by Kubelet to accommodate a critical pod."
            assert (f"{n}-node-a", "Warning", "Preempting", MESSAGE) in events.events
        preempted = {e[0] for e in events.events if e[2] == "Preempting"}
        assert preempted == {"big-node-a", "be-node-a"}


async def containers(node: InProcessKubelet, pod_name: str) -> list[pb.Container]:
    """The runtime's containers of the pod of that name."""
    f = pb.ContainerFilter(label_selector={"io.kubernetes.pod.name": pod_name})
    return await node.rt.list_containers(f)
