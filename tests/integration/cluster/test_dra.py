"""Dynamic Resource Allocation end to end with the real API server: a DRA
driver (the test's, speaking the real registration and DRAPlugin protocols
over Unix sockets) registers with our kubelet; a pod whose ResourceClaim is
not reserved for it gets FailedPrepareDynamicResources and waits; once the
claim is allocated and reserved (what the scheduler does), the kubelet GETs
it, the driver prepares it, the container is created with the driver's CDI
devices, and deleting the pod unprepares the claim."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.draplugin import FakeDRAPlugin
from kubelet.testing.kubelets import KubeletProcess, cluster_kubelet
from kubelet.testing.process import remove_log_links_into, short_dir
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import wait_for

pytestmark = pytest.mark.cluster

NODE = "py-dra-node"
GPU = "gpu.example.com"
CDI = f"{GPU}/gpu=gpu-0"


class DriverThread:
    """The driver's gRPC servers on a loop of their own (the test blocks in kubectl)."""

    def __init__(self, plugin: FakeDRAPlugin, registry: str, endpoint: str) -> None:
        self.plugin = plugin
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(plugin.start(registry, endpoint), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.plugin.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def node(control_plane: ControlPlane) -> Iterator[tuple[KubeletProcess, FakeDRAPlugin, str]]:
    sim = start_simruntime()
    work = short_dir("dra")
    k = cluster_kubelet(control_plane, work, sim.endpoint, NODE)
    driver: DriverThread | None = None
    try:
        wait_for("the node to be Ready", k.ready, timeout=60)
        plugin = FakeDRAPlugin(GPU, {"gpu-claim": [(["gpu"], [CDI])]})
        driver = DriverThread(plugin, str(k.root / "plugins_registry"), str(work / "gpu.sock"))
        reg = plugin.registration
        assert reg is not None
        wait_for("the driver to be registered", lambda: reg.statuses == [(True, "")])
        yield k, plugin, sim.endpoint
    finally:
        if driver is not None:
            driver.stop()
        k.stop()
        sim.stop()
        remove_log_links_into(work)  # outside the session's tmp dirs the sweep misses
        print(f"kubelet log: {k.log}")


def claim_status(pod_uid: str) -> dict[str, Any]:
    return {
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU, "pool": "pool", "device": "gpu-0"}
            ]}},
            "reservedFor": [{"resource": "pods", "name": "dra-pod", "uid": pod_uid}],
        }
    }  # fmt: skip


async def cdi_devices(endpoint: str, container: str) -> list[str]:
    rt = RemoteRuntimeService(endpoint, timeout=5)
    try:
        for c in await rt.list_containers():
            if c.metadata.name == container:
                st = await rt.container_status(c.id, verbose=True)
                devices = json.loads(st.info["info"])["config"].get("CDIDevices", [])
                return [d["name"] for d in devices]
        return []
    finally:
        await rt.close()


def test_a_claim_is_prepared_for_its_pod_and_unprepared_after(node) -> None:  # type: ignore[no-untyped-def]
    k, plugin, endpoint = node
    k.create(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "gpu-claim", "namespace": "default"},
         "spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "dra-pod", "namespace": "default"},
         "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                  "resourceClaims": [{"name": "g", "resourceClaimName": "gpu-claim"}],
                  "containers": [{"name": "main", "image": "busybox:1.36",
                                  "command": ["sleep", "3600"],
                                  "resources": {"claims": [{"name": "g"}]}}]}},
    )  # fmt: skip

    def refusals() -> list[str]:
        return [e["message"] for e in k.events("default")
                if e["reason"] == "FailedPrepareDynamicResources"]  # fmt: skip

    wait_for("FailedPrepareDynamicResources", refusals, timeout=60)
    assert "is not allowed to use ResourceClaim gpu-claim" in refusals()[0]
    assert plugin.prepared == []
    uid = k.kubectl_json("get", "pod", "dra-pod", "-n", "default")["metadata"]["uid"]
    k.kubectl("patch", "resourceclaim", "gpu-claim", "-n", "default", "--subresource=status",
              "--type=merge", "-p", json.dumps(claim_status(uid)))  # fmt: skip

    def phase() -> str:
        return str(k.kubectl_json("get", "pod", "dra-pod", "-n", "default")["status"].get("phase"))

    wait_for("the pod to run", lambda: phase() == "Running", timeout=90)
    assert plugin.prepared == [["gpu-claim"]]
    assert asyncio.run(cdi_devices(endpoint, "main")) == [CDI]
    k.kubectl("delete", "pod", "dra-pod", "-n", "default", "--wait=false")
    wait_for("the claim to be unprepared", lambda: plugin.unprepared == [["gpu-claim"]], timeout=60)
