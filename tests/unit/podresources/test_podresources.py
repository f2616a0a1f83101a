"""The pod-resources API's content from fake managers: which pods and
containers List and Get report (sidecars yes, plain init containers no,
terminated pods only with KubeletPodResourcesListUseActivePods off), devices
with their NUMA nodes, exclusive CPUs, memory blocks, what is allocatable,
v1alpha1, the gates, and the token bucket."""

from __future__ import annotations

import dataclasses
from typing import cast

from kubelet.apis.podresources.server import TokenBucket
from kubelet.apis.podresources.server_v1 import Gates, ResourceReader
from kubelet.apis.podresources.server_v1alpha1 import list_response
from kubelet.apis.podresources.types import ClaimDevice, DynamicClaim
from kubelet.apis.podresources.v1 import api_pb2 as pb
from kubelet.cm.memorymanager.state import Block
from kubelet.types import Container, Pod, uid
from tests.unit.podresources.fixtures import (
    RUNNING,
    FakeDevices,
    providers,
)


def topo(*nodes: int) -> pb.TopologyInfo:
    return pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes])


APP = pb.ContainerResources(
    name="app",
    devices=[
        pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-0"], topology=topo(0)),
        pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-0"], topology=topo(1)),
        pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-1"], topology=topo(1)),
    ],
    cpu_ids=[2, 3],
    memory=[
        pb.ContainerMemory(memory_type="memory", size=64 << 20, topology=topo(1)),
        pb.ContainerMemory(memory_type="hugepages-2Mi", size=2 << 20, topology=topo()),
    ],
)  # fmt: skip
PROXY = pb.ContainerResources(
    name="proxy",
    devices=[pb.ContainerDevices(resource_name="example.com/nic", device_ids=["nic-0"])],
)
WEB = pb.PodResources(name="web", namespace="ns", containers=[PROXY, APP])


def test_list_reports_active_pods_with_sidecars_and_app_containers() -> None:
    p = providers()
    got = ResourceReader(p, Gates()).list()
    # The plain init container "setup" (and its CPU and device) is not reported,
    # nor the terminated pod; the sidecar comes before the app container.
    assert got == pb.ListPodResourcesResponse(pod_resources=[WEB])
    # A device without topology has no topology field (not an empty one).
    assert not got.pod_resources[0].containers[0].devices[0].HasField("topology")
    # Devices of pods gone are released before anything is read.
    assert isinstance(p.devices, FakeDevices) and p.devices.calls[0] == "update"


def test_list_reports_every_known_pod_with_the_active_pods_gate_off() -> None:
    got = ResourceReader(providers(), Gates(list_active_pods=False)).list()
    assert [pr.name for pr in got.pod_resources] == ["web", "job"]
    job = got.pod_resources[1]
    assert [c.name for c in job.containers] == ["work"]
    assert list(job.containers[0].devices[0].device_ids) == ["gpu-2"]


def test_get_answers_one_pod_or_upstreams_errors() -> None:
    reader = ResourceReader(providers(), Gates())
    assert reader.get("ns", "web") == pb.GetPodResourcesResponse(pod_resources=WEB)
    # Get reads the pod manager: a terminated pod it still knows is answered.
    done = reader.get("ns", "job")
    assert isinstance(done, pb.GetPodResourcesResponse) and done.pod_resources.name == "job"
    assert reader.get("other", "web") == "pod web in namespace other not found"
    off = ResourceReader(providers(), Gates(get=False))
    assert off.get("ns", "web") == "PodResources API Get method disabled"


def test_dynamic_resources_are_empty_without_dra() -> None:
    for gates in (Gates(dynamic_resources=True), Gates(dynamic_resources=False)):
        got = ResourceReader(providers(), gates).list()
        assert all(not c.dynamic_resources for c in got.pod_resources[0].containers)


class FakeDRA:
    def dynamic_resources(self, pod: Pod, container: Container) -> list[DynamicClaim]:
        if container["name"] != "app":
            return []
        devs = (ClaimDevice("gpu.example.com", "pool", "g0", ("gpu.example.com/gpu=0",)),
                ClaimDevice("gpu.example.com", "pool", "g1", ("gpu.example.com/gpu=1",)))  # fmt: skip
        return [DynamicClaim("gpus", "ns", devs)]


def test_dynamic_resources_come_from_the_dra_manager_when_the_gate_is_on() -> None:
    p = dataclasses.replace(providers(), dynamic=FakeDRA())
    proxy, app = ResourceReader(p, Gates()).list().pod_resources[0].containers
    assert not proxy.dynamic_resources
    assert list(app.dynamic_resources) == [
        pb.DynamicResource(claim_name="gpus", claim_namespace="ns", claim_resources=[
            pb.ClaimResource(cdi_devices=[pb.CDIDevice(name=f"gpu.example.com/gpu={i}")],
                             driver_name="gpu.example.com", pool_name="pool", device_name=f"g{i}")
            for i in (0, 1)
        ])
    ]  # fmt: skip
    off = ResourceReader(p, Gates(dynamic_resources=False)).list()
    assert all(not c.dynamic_resources for c in off.pod_resources[0].containers)


def test_allocatable_devices_cpus_and_memory() -> None:
    got = ResourceReader(providers(), Gates()).allocatable()
    assert got == pb.AllocatableResourcesResponse(
        devices=[
            pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-0"], topology=topo(0)),
            pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-0"], topology=topo(1)),
            pb.ContainerDevices(resource_name="example.com/gpu", device_ids=["gpu-1"], topology=topo(1)),
            pb.ContainerDevices(resource_name="example.com/nic", device_ids=["nic-0"]),
        ],
        cpu_ids=[1, 2, 3],
        memory=[
            pb.ContainerMemory(memory_type="memory", size=7 << 30, topology=topo(0)),
            pb.ContainerMemory(memory_type="memory", size=8 << 30, topology=topo(1)),
        ],
    )  # fmt: skip


def test_v1alpha1_lists_every_known_pod_app_containers_and_devices_only() -> None:
    got = list_response(providers())
    assert [(pr.name, [c.name for c in pr.containers]) for pr in got.pod_resources] == [
        ("web", ["app"]),
        ("job", ["work"]),
    ]
    app = got.pod_resources[0].containers[0]
    # One entry per device and NUMA node, as v1 has them, without the topology.
    assert [(d.resource_name, list(d.device_ids)) for d in app.devices] == [
        ("example.com/gpu", ["gpu-0"]),
        ("example.com/gpu", ["gpu-0"]),
        ("example.com/gpu", ["gpu-1"]),
    ]
    assert uid(RUNNING) == "u1"


def test_token_bucket_allows_a_burst_then_refills_at_its_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(100, 10, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(11)] == [True] * 10 + [False]
    now[0] += 1 / 128  # 0.78 of a token
    assert not bucket.allow()
    now[0] += 1 / 128  # 1.56 tokens: one call, then 0.56 left
    assert bucket.allow() and not bucket.allow()
    now[0] += 60  # never more than the burst
    assert sum(bucket.allow() for _ in range(20)) == 10


# ------------------------------------------------- the managers as providers
async def test_device_manager_reports_held_and_healthy_devices_with_numa_nodes() -> None:
    import shutil
    import tempfile

    from kubelet.cm.devicemanager import HEALTHY, UNHEALTHY
    from kubelet.cm.devicemanager.manager import DeviceManager
    from kubelet.testing.deviceplugin import FakeDevicePlugin
    from tests.unit.cm.fixtures import Pods, gpu_pod, registered

    root = tempfile.mkdtemp(prefix="pr", dir="/tmp")
    one, two = gpu_pod("one", 2), gpu_pod("two", 1)
    active = Pods(one, two)
    mgr = DeviceManager(root, active)
    await mgr.start()
    plugin = FakeDevicePlugin(
        {"a": HEALTHY, "b": HEALTHY, "c": HEALTHY, "d": UNHEALTHY}, numa={"a": [0], "b": [0, 1]}
    )
    try:
        await registered(mgr.socket_dir, mgr, plugin)
        assert mgr.admit(one) is None and mgr.admit(two) is None
        gpu = "example.com/gpu"
        assert mgr.container_devices("uid-one", "c0") == {gpu: {"a": [0], "b": [0, 1]}}
        assert mgr.container_devices("uid-two", "c0") == {gpu: {"c": []}}
        assert mgr.container_devices("uid-two", "nope") == {}
        # Healthy devices only, each with its topology.
        assert mgr.allocatable_devices() == {gpu: {"a": [0], "b": [0, 1], "c": []}}
        del active.pods["uid-two"]  # finished: List's update releases its devices
        mgr.update_allocated_devices()
        assert mgr.container_devices("uid-two", "c0") == {}
        assert mgr.container_devices("uid-one", "c0") != {}
    finally:
        await plugin.stop()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_cpu_and_memory_managers_report_allocatable_as_upstream(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kubelet.cm.memorymanager.memory_manager import MemoryManager
    from tests.unit.cm.fixtures import GiB, Pods, cm, mem_pod, static

    # All CPUs but the reserved one (DualSocketHT: 12 CPUs, one reserved for 1000m).
    assert cm(tmp_path / "static").allocatable_cpus() == frozenset(range(1, 12))
    assert cm(tmp_path / "none", policy="none").allocatable_cpus() == frozenset()
    policy, state = static()  # two nodes of 16 GiB, 1 GiB hugepages each, 1 GiB reserved on 0
    memory = MemoryManager(policy, state, Pods(), lambda: True)
    want = [
        Block([0], "memory", 14 * GiB), Block([0], "hugepages-2Mi", GiB),
        Block([1], "memory", 15 * GiB), Block([1], "hugepages-2Mi", GiB),
    ]  # fmt: skip
    assert sorted(memory.allocatable_memory(), key=repr) == sorted(want, key=repr)
    p = cast(Pod, mem_pod("u1", ("c", "2Gi", False)))
    memory.allocate(p, p["spec"]["containers"][0])
    assert memory.memory_blocks("u1", "c") == [Block([0], "memory", 2 * GiB)]
    # Allocatable is what the node can hand out, not what is left.
    assert sorted(memory.allocatable_memory(), key=repr) == sorted(want, key=repr)
