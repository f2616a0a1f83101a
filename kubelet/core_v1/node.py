"""The Node, as admission and the node lister read it."""

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


class NodeStatus(TypedDict, total=False):
    capacity: ResourceList
    allocatable: ResourceList
    features: NodeFeatures


class Node(TypedDict, total=False):
    """What admission reads of a Node: its name, labels, taints and allocatable."""

    apiVersion: str
    kind: str
    metadata: Required[ObjectMeta]
    spec: NodeSpec
    status: NodeStatus
