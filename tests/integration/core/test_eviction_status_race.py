"""An eviction while the pod's sync waits on the runtime (a slow pull): the
sync must not write its Pending status over the eviction's Failed. Seen in CI:
a pod went Failed, Pending, Failed in the API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import start_simruntime
from kubelet.types import uid

PULL_S = 3.0


@pytest.fixture
async def slow_pull_node(tmp_path: Path) -> AsyncIterator[InProcessKubelet]:
    sim = start_simruntime(None, "--pull-delay", str(PULL_S))
    try:
        async with in_process_kubelet(sim.endpoint, tmp_path) as n:
            yield n
    finally:
        sim.stop()


async def test_a_sync_in_flight_does_not_undo_an_eviction(slow_pull_node: InProcessKubelet) -> None:
    n = slow_pull_node
    n.write("slow", [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Always",
                      "command": ["sleep", "3600"]}])  # fmt: skip
    await n.wait(lambda: n.pod("slow") is not None, what="the pod admitted")
    pod = n.pod("slow")
    assert pod is not None
    # Its first sync is now waiting on the pull; evict it meanwhile.
    await asyncio.sleep(PULL_S / 3)
    await n.kubelet.eviction.evict(pod, 1, "Evicted", "test eviction")
    phases = []
    deadline = asyncio.get_running_loop().time() + PULL_S * 2
    while asyncio.get_running_loop().time() < deadline:
        st = n.kubelet.status_manager.get(uid(pod)) or {}
        phases.append(st.get("phase"))
        await asyncio.sleep(0.05)
    first = phases.index("Failed")
    assert set(phases[first:]) == {"Failed"}, phases
    st = n.kubelet.status_manager.get(uid(pod)) or {}
    assert (st.get("reason"), st.get("message")) == ("Evicted", "test eviction")
