"""A kubelet restart keeps a running container's devices (upstream's "Keeps
device plugin assignments across pod and kubelet restarts (no device plugin
restart)"). The restarted kubelet re-admits the pod before the plugin has
registered again, when the device manager knows the device only as
unhealthy: upstream admits it because its container is running. Here that
needs the runtime's view before the first pod is admitted; without it the
pod was refused with UnexpectedAdmissionError and its container killed."""

from __future__ import annotations

from pathlib import Path

from kubelet.cm.devicemanager import HEALTHY
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.simruntime import SimRuntimeProc

R = "example.com/gpu"
MAX_PODS = 110  # within a default user namespace range (see test_device_health)
CONTAINER = {
    "name": "c",
    "image": "busybox",
    "resources": {"limits": {R: "1"}, "requests": {R: "1"}},
}


def container_id(node: InProcessKubelet) -> str:
    pod = node.pod("gpu")
    statuses = pod.get("status", {}).get("containerStatuses", []) if pod else []
    return str(statuses[0].get("containerID") or "") if statuses else ""


async def test_a_restart_keeps_the_devices_of_a_running_container(
    simruntime: SimRuntimeProc, short_root: Path
) -> None:
    plugin = FakeDevicePlugin({"d0": HEALTHY})
    try:
        async with in_process_kubelet(simruntime.endpoint, short_root, max_pods=MAX_PODS) as node:
            devices = node.kubelet.resource_managers.devices
            await node.wait(lambda: Path(devices.server.socket_path).exists(), 30, "kubelet.sock")
            await plugin.register(devices.socket_dir, "gpu.sock", R)
            await node.wait(lambda: devices.capacity().allocatable.get(R) == 1, 30, "d0")
            node.write("gpu", [CONTAINER])
            await node.wait(lambda: node.phase("gpu") == "Running", 60, "gpu Running")
            before = container_id(node)
            assert before
        # The plugin stays up but has not registered with the new kubelet.
        async with in_process_kubelet(simruntime.endpoint, short_root, max_pods=MAX_PODS) as node:
            await node.wait(lambda: node.phase("gpu") is not None, 30, "gpu seen again")
            await node.wait(lambda: container_id(node) == before, 30, "the same container")
            assert node.phase("gpu") == "Running"
            assert not [e for e in node.events.events if e[2] == "UnexpectedAdmissionError"]
            pod = node.pod("gpu")
            assert pod is not None
            kept = node.kubelet.resource_managers.devices.pod_devices
            assert [a.ids for a in kept.container(pod["metadata"]["uid"], "c").values()] == [["d0"]]
    finally:
        await plugin.stop()
