"""The v1 PodResourcesLister (server_v1.go upstream): List, GetAllocatableResources
and Get, built from the providers on each call.

Which containers appear: the restartable init containers (sidecars) then the
regular containers; plain init containers are left out, as upstream leaves
them (they have finished by the time a pod runs, and what they held was
handed on to the app containers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc

from kubelet import metrics
from kubelet.apis.podresources.types import (
    DeviceInstances,
    DynamicClaim,
    MemoryBlock,
    Providers,
)
from kubelet.apis.podresources.v1 import api_pb2 as pb
from kubelet.apis.podresources.v1 import api_pb2_grpc as pb_grpc
from kubelet.types import Container, Pod, name, namespace, uid

log = logging.getLogger(__name__)

API_VERSION = "v1"


@dataclass(frozen=True)
class Gates:
    """The feature gates the v1 server reads (all on by default in v1.34)."""

    # KubeletPodResourcesGet: off, Get answers an error.
    get: bool = True
    # KubeletPodResourcesDynamicResources: on, dynamic_resources is asked for.
    dynamic_resources: bool = True
    # KubeletPodResourcesListUseActivePods: off, List reports every known pod.
    list_active_pods: bool = True


def devices_message(devices: DeviceInstances) -> list[pb.ContainerDevices]:
    """One entry per device and NUMA node it is on; a device without topology
    gets one entry without it (containerDevicesFromResourceDeviceInstances)."""
    out = []
    for resource in sorted(devices):
        for device_id, nodes in sorted(devices[resource].items()):
            if not nodes:
                out.append(pb.ContainerDevices(resource_name=resource, device_ids=[device_id]))
                continue
            for n in nodes:
                out.append(
                    pb.ContainerDevices(
                        resource_name=resource,
                        device_ids=[device_id],
                        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n)]),
                    )
                )
    return out


def memory_message(blocks: Iterable[MemoryBlock]) -> list[pb.ContainerMemory]:
    """Each block with its NUMA nodes; the topology is always set (possibly empty)."""
    return [
        pb.ContainerMemory(
            memory_type=b.type,
            size=b.size,
            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in b.numa_affinity or []]),
        )
        for b in blocks
    ]


def dynamic_message(claims: Iterable[DynamicClaim]) -> list[pb.DynamicResource]:
    """One ClaimResource per prepared device, each with its own CDI devices."""
    return [
        pb.DynamicResource(
            claim_name=c.name,
            claim_namespace=c.namespace,
            claim_resources=[
                pb.ClaimResource(
                    cdi_devices=[pb.CDIDevice(name=i) for i in d.cdi_ids],
                    driver_name=d.driver,
                    pool_name=d.pool,
                    device_name=d.device,
                )
                for d in c.devices
            ],
        )
        for c in claims
    ]


def reported_containers(pod: Pod) -> list[Container]:
    """Sidecars (init containers with restartPolicy Always), then the app containers."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [*sidecars, *(spec.get("containers") or [])]


class ResourceReader:
    """What the server reports of a pod and of the node, from the providers."""

    def __init__(self, providers: Providers, gates: Gates) -> None:
        self.providers = providers
        self.gates = gates

    def container(self, pod: Pod, c: Container) -> pb.ContainerResources:
        p, pod_uid, cname = self.providers, uid(pod), c["name"]
        dynamic: list[pb.DynamicResource] = []
        if self.gates.dynamic_resources and p.dynamic is not None:
            dynamic = dynamic_message(p.dynamic.dynamic_resources(pod, c))
        return pb.ContainerResources(
            name=cname,
            devices=devices_message(p.devices.container_devices(pod_uid, cname)),
            cpu_ids=sorted(p.cpus.exclusive_cpus(pod_uid, cname)),
            memory=memory_message(p.memory.memory_blocks(pod_uid, cname)),
            dynamic_resources=dynamic,
        )

    def pod(self, pod: Pod) -> pb.PodResources:
        return pb.PodResources(
            name=name(pod),
            namespace=namespace(pod),
            containers=[self.container(pod, c) for c in reported_containers(pod)],
        )

    def listed_pods(self) -> Sequence[Pod]:
        pods = self.providers.pods
        return pods.active_pods() if self.gates.list_active_pods else pods.all_pods()

    def list(self) -> pb.ListPodResourcesResponse:
        pods = self.listed_pods()
        self.providers.devices.update_allocated_devices()
        return pb.ListPodResourcesResponse(pod_resources=[self.pod(p) for p in pods])

    def allocatable(self) -> pb.AllocatableResourcesResponse:
        p = self.providers
        return pb.AllocatableResourcesResponse(
            devices=devices_message(p.devices.allocatable_devices()),
            cpu_ids=sorted(p.cpus.allocatable_cpus()),
            memory=memory_message(p.memory.allocatable_memory()),
        )

    def get(self, pod_namespace: str, pod_name: str) -> pb.GetPodResourcesResponse | str:
        """The pod's resources, or upstream's error text."""
        if not self.gates.get:
            return "PodResources API Get method disabled"
        pod = self.providers.pods.pod_by_name(pod_namespace, pod_name)
        if pod is None:
            return f"pod {pod_name} in namespace {pod_namespace} not found"
        return pb.GetPodResourcesResponse(pod_resources=self.pod(pod))


class V1Server(pb_grpc.PodResourcesListerServicer):
    """Errors as upstream's: a plain Go error, which grpc-go sends as code Unknown."""

    def __init__(self, reader: ResourceReader) -> None:
        self.reader = reader

    async def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        _count("list")
        return self.reader.list()

    async def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        _count("get_allocatable")
        return self.reader.allocatable()

    async def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        _count("get")
        answer = self.reader.get(request.pod_namespace, request.pod_name)
        if isinstance(answer, str):
            metrics.POD_RESOURCES.error(API_VERSION, "get")
            await context.abort(grpc.StatusCode.UNKNOWN, answer)
        assert not isinstance(answer, str)
        return answer


def _count(method: str) -> None:
    metrics.POD_RESOURCES_REQUESTS.labels(API_VERSION).inc()
    metrics.POD_RESOURCES.request(API_VERSION, method)
