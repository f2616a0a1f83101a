"""The Node, as admission and the node lister read it and the node status
manager writes its status."""

from __future__ import annotations

from typing import Required, TypedDict

from kubelet.core_v1.meta import ObjectMeta, ResourceList


class Taint(TypedDict, total=False):
    key: Required[str]
    value: str
    effect: Required[str]  # NoSchedule, PreferNoSchedule, NoExecute
    timeAdded: str


class NodeSpec(TypedDict, total=False):
    podCIDR: str
    podCIDRs: list[str]
    providerID: str
    unschedulable: bool
    taints: list[Taint]


class NodeFeatures(TypedDict, total=False):
    supplementalGroupsPolicy: bool


class NodeCondition(TypedDict, total=False):
    type: Required[str]  # Ready, MemoryPressure, DiskPressure, PIDPressure, ...
    status: Required[str]  # True, False, Unknown
    lastHeartbeatTime: str
    lastTransitionTime: str
    reason: str
    message: str


class NodeAddress(TypedDict):
    type: str  # InternalIP, Hostname, ...
    address: str


class DaemonEndpoint(TypedDict):
    Port: int  # spelt so on the wire


class NodeDaemonEndpoints(TypedDict, total=False):
    kubeletEndpoint: DaemonEndpoint


class NodeSwapStatus(TypedDict, total=False):
    capacity: int


class NodeSystemInfo(TypedDict, total=False):
    machineID: str
    systemUUID: str
    bootID: str
    kernelVersion: str
    osImage: str
    containerRuntimeVersion: str
    kubeletVersion: str
    kubeProxyVersion: str
    operatingSystem: str
    architecture: str
    swap: NodeSwapStatus


class ContainerImage(TypedDict, total=False):
    names: list[str]
    sizeBytes: int


class NodeRuntimeHandlerFeatures(TypedDict, total=False):
    recursiveReadOnlyMounts: bool
    userNamespaces: bool


class NodeRuntimeHandler(TypedDict, total=False):
    name: str  # "" for the runtime's default handler
    features: NodeRuntimeHandlerFeatures


class NodeStatus(TypedDict, total=False):
    capacity: ResourceList
    allocatable: ResourceList
    features: NodeFeatures
    conditions: list[NodeCondition]
    addresses: list[NodeAddress]
    daemonEndpoints: NodeDaemonEndpoints
    nodeInfo: NodeSystemInfo
    images: list[ContainerImage]
    volumesInUse: list[str]
    runtimeHandlers: list[NodeRuntimeHandler]


class Node(TypedDict, total=False):
    """What admission reads of a Node: its name, labels, taints and allocatable."""

    apiVersion: str
    kind: str
    metadata: Required[ObjectMeta]
    spec: NodeSpec
    status: NodeStatus
