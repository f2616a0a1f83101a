"""ResourceHealthStatus in a running kubelet (simulated runtime): a device
plugin speaking v1beta1 over the kubelet's socket gives a static pod's
container one device; its status reports the device Healthy, and once the
plugin lists it Unhealthy the status says so without waiting for the periodic
resync (set to five minutes here, far beyond the wait), as upstream's
"Device Plugin Failures Pod Status" spec expects. With the gate off the field
never appears."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import SimRuntimeProc

R = "example.com/gpu"
# Within any /etc/subuid range for "kubelet" (the default maxPods): the
# fixture's 500 would need more user namespace IDs than a node may give.
MAX_PODS = 110
CONTAINER = {
    "name": "c",
    "image": "busybox",
    "resources": {"limits": {R: "1"}, "requests": {R: "1"}},
}


async def started(node: InProcessKubelet) -> FakeDevicePlugin:
    devices = node.kubelet.resource_managers.devices
    plugin = FakeDevicePlugin({"d0": HEALTHY})
    await node.wait(lambda: Path(devices.server.socket_path).exists(), 30, "kubelet.sock")
    await plugin.register(devices.socket_dir, "gpu.sock", R)
    await node.wait(lambda: devices.capacity().allocatable.get(R) == 1, 30, "d0 allocatable")
    node.write("gpu", [CONTAINER])
    await node.wait(lambda: node.phase("gpu") == "Running", 60, "gpu Running")
    return plugin


def health(node: InProcessKubelet) -> Any:
    return node.container("gpu", "c").get("allocatedResourcesStatus")


async def test_an_unhealthy_device_reaches_the_container_status(
    simruntime: SimRuntimeProc, short_root: Path
) -> None:
    async with in_process_kubelet(
        simruntime.endpoint, short_root, sync_frequency=300.0, max_pods=MAX_PODS,
        feature_gates={"ResourceHealthStatus": True},
    ) as node:  # fmt: skip
        plugin = await started(node)
        try:
            want = [{"name": R, "resources": [{"resourceID": "d0", "health": HEALTHY}]}]
            await node.wait(lambda: health(node) == want, 30, "d0 Healthy in the status")
            # The syncs of the start (the PLEG's ContainerStarted) are over: no
            # sync but the device manager's asks for one before the resync.
            await node.wait(lambda: node.container("gpu", "c")["ready"], 30, "c ready")
            plugin.update({"d0": UNHEALTHY})
            want[0]["resources"][0]["health"] = UNHEALTHY
            await node.wait(lambda: health(node) == want, 30, "d0 Unhealthy in the status")
            assert node.phase("gpu") == "Running"  # reported, not acted on
        finally:
            await plugin.stop()


async def test_with_the_gate_off_the_status_has_no_device_health(
    simruntime: SimRuntimeProc, short_root: Path
) -> None:
    async with in_process_kubelet(simruntime.endpoint, short_root, max_pods=MAX_PODS) as node:
        plugin = await started(node)
        try:
            # Running: its status was made while the container held d0.
            assert node.container("gpu", "c")["state"].get("running") is not None
            assert health(node) is None
        finally:
            await plugin.stop()
