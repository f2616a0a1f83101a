"""What the CPU, memory and device manager tests share: a fixed topology
manager, the active pods, guaranteed pods for each manager, managers built on
fake topologies, and reading a device manager's counts and allocations."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.cpumanager.cpu_manager import CPUManager, Reservation, new_cpu_manager
from kubelet.cm.devicemanager import HEALTHY
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.interfaces import RunningContainer
from kubelet.cm.memorymanager.policy_static import StaticPolicy
from kubelet.cm.memorymanager.state import MemoryManagerState
from kubelet.cm.resource_managers import (
    ResourceManagerConfig,
    ResourceManagers,
    new_resource_managers,
)
from kubelet.cm.sysinfo import Core, HugePages, MachineTopology, Node
from kubelet.cm.topologymanager.policy import TopologyHint
from kubelet.features import FeatureGate
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.wait import wait_for_async
from kubelet.types import Pod
from kubelet.util import cpuset
from tests.unit.cm.topologies import topology, two_numa_nodes


class Affinity:
    """The topology manager as the policy sees it: fixed hints."""

    def __init__(self, policy_name: str = "none") -> None:
        self.hints: dict[tuple[str, str], TopologyHint] = {}
        self.policy_name = policy_name

    def get_affinity(self, pod_uid: str, name: str) -> TopologyHint:
        return self.hints.get((pod_uid, name), TopologyHint(None, False))


def gpod(uid: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [], "initContainers": []}
    for c in containers:
        res = {"cpu": c["cpu"], "memory": "1Gi"}
        ctr: dict[str, Any] = {"name": c["name"], "resources": {"requests": res, "limits": res}}
        if c.get("sidecar"):
            ctr["restartPolicy"] = "Always"
        spec["initContainers" if c.get("init") else "containers"].append(ctr)
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"}, "spec": spec}


class Pods:
    """The active pods the resource managers ask about, and what runs of them."""

    def __init__(self, *pods: Pod) -> None:
        self.pods: dict[str, Pod] = {p["metadata"]["uid"]: p for p in pods}
        self.running: dict[str, list[RunningContainer]] = {}

    def active_pod(self, u: str) -> Pod | None:
        return self.pods.get(u)

    def active_pods(self) -> list[Pod]:
        return list(self.pods.values())

    def running_containers(self, u: str) -> list[RunningContainer]:
        return self.running.get(u, [])


def cm(tmp: Path, pods: Pods | None = None, policy: str = "static", topo: str = "DualSocketHT",
       reserved: Reservation = Reservation(cpu_millis=1000), **opts: str) -> CPUManager:  # fmt: skip
    return new_cpu_manager(
        policy, opts, 10.0, topology(topo), reserved, str(tmp), Affinity(), FeatureGate(),
        pods or Pods(), lambda: True,
    )  # fmt: skip


GiB = 1 << 30


def machine(nodes: int = 2, mem: int = 16 * GiB) -> MachineTopology:
    return MachineTopology(
        [
            Node(i, [Core(i, 0, [i])], mem, [HugePages(2048, 512)], [10] * nodes)
            for i in range(nodes)
        ],
        nodes,
        1,
    )


def mem_pod(uid: str, *containers: tuple[str, str, bool]) -> dict[str, Any]:
    spec: dict[str, Any] = {"initContainers": [], "containers": []}
    for name, mem, init in containers:
        res = {"cpu": "1", "memory": mem}
        spec["initContainers" if init else "containers"].append(
            {"name": name, "resources": {"requests": res, "limits": res}}
        )
    return {"metadata": {"uid": uid}, "spec": spec}


def static(
    nodes: int = 2, affinity: Affinity | None = None
) -> tuple[StaticPolicy, MemoryManagerState]:
    p = StaticPolicy(machine(nodes), {0: {"memory": GiB}}, affinity or Affinity())
    s = MemoryManagerState("Static")
    p.start(s)
    return p, s


R = "example.com/gpu"


def counts(mgr: DeviceManager, resource: str = R) -> tuple[int, int]:
    cap, alloc, removed = mgr.capacity()
    if resource in removed:
        return (0, 0)
    return (cap.get(resource, -1), alloc.get(resource, -1))


def gpu_pod(name: str, *counts: int, init: tuple[int, ...] = ()) -> Pod:
    def ctr(cname: str, n: int) -> dict[str, Any]:
        lim = {R: str(n), "cpu": "100m"}
        return {"name": cname, "image": "i", "resources": {"limits": lim, "requests": lim}}

    return cast(Pod, {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "initContainers": [ctr(f"init{i}", n) for i, n in enumerate(init)],
            "containers": [ctr(f"c{i}", n) for i, n in enumerate(counts)],
        },
    })  # fmt: skip


def held(mgr: DeviceManager, pod: Pod, container: str = "c0") -> list[str]:
    alloc = mgr.pod_devices.get(pod["metadata"]["uid"], container, R)
    return alloc.ids if alloc is not None else []


async def registered(sockdir: str, mgr: DeviceManager, plugin: FakeDevicePlugin) -> None:
    await plugin.register(sockdir, "p.sock", R)
    await wait_for_async(
        f"{len(plugin.devices)} devices of {R}",
        lambda: counts(mgr)[0] == len(plugin.devices),
        20,
        every=0.01,
        retry_on=(),
    )


def numa_managers(
    root: str, policy: str, scope: str = "container", pods: Pods | None = None
) -> ResourceManagers:
    """The resource managers on two NUMA nodes (CPUs 0-1, 2-3), static CPU
    policy with CPUs 2-3 reserved: exclusive CPUs only on NUMA 0."""
    cfg = KubeletConfiguration()
    cfg.cpu_manager_policy = "static"
    cfg.topology_manager_policy = policy
    cfg.topology_manager_scope = scope
    rc = ResourceManagerConfig(two_numa_nodes(), {"cpu": 2000}, root, cpuset.parse("2-3"))
    return new_resource_managers(cfg, rc, FeatureGate(), pods or Pods(), lambda: True)


def cpu_gpu_pod(name: str, gpus: int = 1) -> Pod:
    """A Guaranteed pod asking for devices of R and one exclusive CPU."""
    pod = gpu_pod(name, gpus)
    lim = {R: str(gpus), "cpu": "1", "memory": "64Mi"}
    pod["spec"]["containers"][0]["resources"] = {"limits": lim, "requests": dict(lim)}
    return pod


@contextlib.asynccontextmanager
async def serving_devices(
    rm: ResourceManagers, numa: dict[str, list[int]], health: dict[str, str] | None = None
) -> AsyncIterator[FakeDevicePlugin]:
    """The managers' registration server with a plugin of R listing these
    devices on these NUMA nodes (healthy unless said otherwise)."""
    await rm.devices.start()
    plugin = FakeDevicePlugin(health or dict.fromkeys(numa, HEALTHY), numa=numa)
    try:
        await registered(rm.devices.socket_dir, rm.devices, plugin)
        yield plugin
    finally:
        await plugin.stop()
        await rm.devices.stop()
