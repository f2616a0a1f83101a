"""Node-pressure eviction end to end: a kubelet whose memory threshold is always met
reports MemoryPressure, refuses BestEffort pods and evicts the pods it runs, which
end Failed with reason Evicted. evictionHard memory.available is 99%: no real node
has 99 % of its memory free, and allocatable keeps 1 % so a small Burstable pod is
still admitted (at 100 % allocatable memory would be 0 and it would be OutOfmemory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import pod_manifest, start_node

pytestmark = pytest.mark.cluster

NODE = "py-pressure-node"


@pytest.fixture
def pressured(control_plane: ControlPlane, tmp_path: Path) -> Iterator[KubeletProcess]:
    sim = start_simruntime()
    k = start_node(
        control_plane,
        tmp_path,
        sim.endpoint,
        node_name=NODE,
        config={"evictionHard": {"memory.available": "99%"},
                "evictionPressureTransitionPeriod": "30s"},
    )  # fmt: skip
    try:
        yield k
    finally:
        k.stop()
        sim.stop()
        print(f"kubelet log: {k.log}")


def test_memory_pressure_evicts_and_gates_admission(pressured: KubeletProcess) -> None:
    k = pressured

    def conditions() -> dict[str, str]:
        n = k.kubectl_json("get", "node", NODE)
        return {c["type"]: c["status"] for c in n["status"].get("conditions", [])}

    wait_for("MemoryPressure on the node", lambda: conditions().get("MemoryPressure") == "True")
    be = pod_manifest("pressure-be", {"app": "pressure"}, "sleep 1000")
    burst = pod_manifest("pressure-burst", {"app": "pressure"}, "sleep 1000")
    burst["spec"]["containers"][0]["resources"] = {"requests": {"memory": "16Mi"}}
    for p in (be, burst):
        p["spec"]["nodeName"] = NODE
    k.create(be, burst)

    def status(name: str) -> dict[str, Any]:
        return dict(k.kubectl_json("get", "pod", name, "-n", "default")["status"])

    wait_for(
        "the BestEffort pod to be refused", lambda: status("pressure-be").get("phase") == "Failed"
    )
    st = status("pressure-be")
    assert st["reason"] == "Evicted" and "MemoryPressure" in st["message"]
    # The Burstable pod is admitted, then evicted by the next pass (every 10 s).
    wait_for(
        "the Burstable pod to be evicted",
        lambda: status("pressure-burst").get("reason") == "Evicted",
        timeout=60,
    )
    st = status("pressure-burst")
    assert st["phase"] == "Failed"
    assert st["message"].startswith("The node was low on resource: memory.")
    # As upstream: a node-pressure eviction marks the pod a disruption target.
    disruption = [c for c in st.get("conditions", []) if c["type"] == "DisruptionTarget"]
    assert len(disruption) == 1, st.get("conditions")
    assert (disruption[0]["status"], disruption[0]["reason"]) == ("True", "TerminationByKubelet")
    assert disruption[0]["message"] == st["message"]
    assert disruption[0]["observedGeneration"] == 1
    events = k.kubectl_json(
        "get", "events", "-n", "default", "--field-selector", "involvedObject.name=pressure-burst"
    )["items"]
    evicted = [e for e in events if e["reason"] == "Evicted"]
    assert evicted, events
    # What was starved, in the annotation upstream's tools read.
    assert evicted[0]["metadata"]["annotations"]["starved_resource"] == "memory"
