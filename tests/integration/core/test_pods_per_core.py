"""podsPerCore: the node's pod capacity is min(maxPods, podsPerCore x cores),
in Node.status (capacity and allocatable) and at admission."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs, allocatable, capacity
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet


def inputs(**cfg_fields: object) -> NodeInputs:
    cfg = KubeletConfiguration()
    for k, v in cfg_fields.items():
        setattr(cfg, k, v)
    m = machine_info()
    m.num_cores = 4
    return NodeInputs(name="n", config=cfg, machine=m, kubelet_version="v1.34.4")


def test_pod_capacity_is_the_lower_of_max_pods_and_pods_per_core() -> None:
    assert capacity(inputs())["pods"] == "110"
    assert capacity(inputs(pods_per_core=10))["pods"] == "40"  # 10 x 4 cores
    assert capacity(inputs(pods_per_core=100))["pods"] == "110"  # maxPods is lower
    inp = inputs(pods_per_core=3, max_pods=500)
    assert allocatable(inp, capacity(inp))["pods"] == "12"


@pytest.fixture
async def per_core_node(simruntime, tmp_path: Path) -> AsyncIterator[InProcessKubelet]:  # type: ignore[no-untyped-def]
    async with in_process_kubelet(
        simruntime.endpoint, tmp_path, pods_per_core=1
    ) as n:  # maxPods stays 500
        yield n


async def test_admission_refuses_pods_past_pods_per_core(per_core_node: InProcessKubelet) -> None:
    node = per_core_node
    cores = os.cpu_count() or 1
    for i in range(cores + 1):
        node.write(f"p{i}", [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}])

    def phases() -> list[str | None]:
        return sorted(str(node.phase(f"p{i}")) for i in range(cores + 1))

    await node.wait(
        lambda: phases() == sorted(["Running"] * cores + ["Failed"]), timeout=30, what="one refused"
    )
    (refused,) = [node.pod(f"p{i}") for i in range(cores + 1) if node.phase(f"p{i}") == "Failed"]
    assert refused is not None
    # Static pods are critical: the kubelet tries to preempt for it, finds no
    # pod it may preempt (all are critical), and says so as upstream does.
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"
    assert refused["status"]["message"] == (
        "Pod was rejected: Unexpected error while attempting to recover from admission failure: "
        "preemption: error finding a set of pods to preempt: no set of running pods found to "
        "reclaim resources: [(res: pods, q: 1), ]"
    )
