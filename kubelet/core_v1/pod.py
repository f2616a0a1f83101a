"""The Pod: its spec (with the scheduling constraints admission re-checks) and its
status.
"""

from __future__ import annotations

from typing import Required, TypedDict

from kubelet.core_v1.container import (
    AppArmorProfile,
    Container,
    EphemeralContainer,
    ResourceRequirements,
    SeccompProfile,
    SELinuxOptions,
)
from kubelet.core_v1.meta import LocalObjectReference, ObjectMeta, ResourceList
from kubelet.core_v1.volume import Volume


class Sysctl(TypedDict):
    name: str
    value: str


class PodSecurityContext(TypedDict, total=False):
    seLinuxOptions: SELinuxOptions
    runAsUser: int
    runAsGroup: int
    runAsNonRoot: bool
    supplementalGroups: list[int]
    supplementalGroupsPolicy: str
    fsGroup: int
    sysctls: list[Sysctl]
    fsGroupChangePolicy: str
    seccompProfile: SeccompProfile
    appArmorProfile: AppArmorProfile
    seLinuxChangePolicy: str


class PodDNSConfigOption(TypedDict, total=False):
    name: str
    value: str


class PodDNSConfig(TypedDict, total=False):
    nameservers: list[str]
    searches: list[str]
    options: list[PodDNSConfigOption]


class HostAlias(TypedDict, total=False):
    ip: Required[str]
    hostnames: list[str]


class PodReadinessGate(TypedDict):
    conditionType: str


class Toleration(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


class PodOS(TypedDict):
    name: str


class NodeSelectorRequirement(TypedDict, total=False):
    key: Required[str]
    operator: Required[str]  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict):
    nodeSelectorTerms: list[NodeSelectorTerm]


class NodeAffinity(TypedDict, total=False):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector


class Affinity(TypedDict, total=False):
    # podAffinity and podAntiAffinity are the scheduler's alone: the kubelet never reads them.
    nodeAffinity: NodeAffinity


class PodSpec(TypedDict, total=False):
    volumes: list[Volume]
    initContainers: list[Container]
    containers: Required[list[Container]]
    ephemeralContainers: list[EphemeralContainer]
    restartPolicy: str
    terminationGracePeriodSeconds: int
    activeDeadlineSeconds: int
    dnsPolicy: str
    nodeSelector: dict[str, str]
    affinity: Affinity
    serviceAccountName: str
    serviceAccount: str
    automountServiceAccountToken: bool
    nodeName: str
    hostNetwork: bool
    hostPID: bool
    hostIPC: bool
    shareProcessNamespace: bool
    securityContext: PodSecurityContext
    imagePullSecrets: list[LocalObjectReference]
    hostname: str
    subdomain: str
    priority: int
    priorityClassName: str
    dnsConfig: PodDNSConfig
    hostAliases: list[HostAlias]
    readinessGates: list[PodReadinessGate]
    runtimeClassName: str
    enableServiceLinks: bool
    overhead: ResourceList
    setHostnameAsFQDN: bool
    hostUsers: bool
    schedulerName: str
    tolerations: list[Toleration]
    resources: ResourceRequirements  # pod-level (PodLevelResources)
    os: PodOS


class PodCondition(TypedDict, total=False):
    type: Required[str]
    status: Required[str]
    observedGeneration: int
    lastProbeTime: str | None
    lastTransitionTime: str
    reason: str
    message: str


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateRunning(TypedDict, total=False):
    startedAt: str | None


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: Required[int]
    signal: int
    reason: str
    message: str
    startedAt: str | None
    finishedAt: str | None
    containerID: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: ContainerStateRunning
    terminated: ContainerStateTerminated


class LinuxContainerUser(TypedDict, total=False):
    uid: Required[int]
    gid: Required[int]
    supplementalGroups: list[int]


class ContainerUser(TypedDict, total=False):
    linux: LinuxContainerUser


class ResourceHealth(TypedDict):
    resourceID: str
    health: str  # Healthy, Unhealthy or Unknown


class ResourceStatus(TypedDict, total=False):
    """One resource of a container's allocatedResourcesStatus (ResourceHealthStatus)."""

    name: Required[str]
    resources: list[ResourceHealth]


class VolumeMountStatus(TypedDict, total=False):
    name: Required[str]
    mountPath: Required[str]
    readOnly: bool
    recursiveReadOnly: str  # Disabled or Enabled, for a read-only mount


class ContainerStatus(TypedDict, total=False):
    name: Required[str]
    state: ContainerState
    lastState: ContainerState
    ready: bool
    restartCount: int
    image: str
    imageID: str
    containerID: str
    started: bool
    resources: ResourceRequirements
    allocatedResources: ResourceList
    allocatedResourcesStatus: list[ResourceStatus]
    stopSignal: str
    user: ContainerUser
    volumeMounts: list[VolumeMountStatus]


class PodIP(TypedDict):
    ip: str


class PodStatus(TypedDict, total=False):
    observedGeneration: int
    phase: str
    conditions: list[PodCondition]
    message: str
    reason: str
    hostIP: str | None
    hostIPs: list[PodIP]
    podIP: str
    podIPs: list[PodIP]
    startTime: str
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]
    ephemeralContainerStatuses: list[ContainerStatus]
    qosClass: str


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: Required[ObjectMeta]
    spec: Required[PodSpec]
    status: PodStatus
