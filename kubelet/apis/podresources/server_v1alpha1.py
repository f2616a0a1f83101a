"""The v1alpha1 PodResourcesLister (server_v1alpha1.go): List only, devices
without topology, every pod the pod manager knows and only its app containers
(v1alpha1 predates sidecars and the active-pods filter; upstream kept it so)."""

from __future__ import annotations

import grpc

from kubelet import metrics
from kubelet.apis.podresources.server_v1 import devices_message
from kubelet.apis.podresources.types import Providers
from kubelet.apis.podresources.v1alpha1 import api_pb2 as pb
from kubelet.apis.podresources.v1alpha1 import api_pb2_grpc as pb_grpc
from kubelet.types import Pod, name, namespace, uid

API_VERSION = "v1alpha1"


def list_response(providers: Providers) -> pb.ListPodResourcesResponse:
    pods = providers.pods.all_pods()
    providers.devices.update_allocated_devices()
    return pb.ListPodResourcesResponse(pod_resources=[_pod(providers, p) for p in pods])


def _pod(providers: Providers, pod: Pod) -> pb.PodResources:
    containers = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        # The v1 entries, one per device and NUMA node, without the topology.
        v1 = devices_message(providers.devices.container_devices(uid(pod), c["name"]))
        devices = [pb.ContainerDevices(resource_name=d.resource_name, device_ids=d.device_ids)
                   for d in v1]  # fmt: skip
        containers.append(pb.ContainerResources(name=c["name"], devices=devices))
    return pb.PodResources(name=name(pod), namespace=namespace(pod), containers=containers)


class V1Alpha1Server(pb_grpc.PodResourcesListerServicer):
    def __init__(self, providers: Providers) -> None:
        self.providers = providers

    async def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        metrics.POD_RESOURCES_REQUESTS.labels(API_VERSION).inc()
        return list_response(self.providers)
