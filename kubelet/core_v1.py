"""The core/v1 API objects the kubelet reads, typed as the API spells them
(k8s.io/api/core/v1 types.go, only the fields this kubelet reads or writes).

Every field the API may leave out is optional (total=False); `metadata` and
`spec` of a Pod are always there once a pod source has admitted it
(config/common.py apply_defaults). Where two API types have one shape they are
one TypedDict under both names. kubelet/types.py re-exports all of it.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

# A resource quantity as JSON carries it: "100m", "1Gi", or a bare number.
Quantity = str | int | float
ResourceList = dict[str, Quantity]
# An int-or-string (ports, maxUnavailable): 8080 or "http".
IntOrString = int | str


# ------------------------------------------------------------- metadata
class OwnerReference(TypedDict, total=False):
    apiVersion: Required[str]
    kind: Required[str]
    name: Required[str]
    uid: Required[str]
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class ObjectReference(TypedDict, total=False):
    kind: str
    namespace: str
    name: str
    uid: str
    apiVersion: str
    resourceVersion: str
    fieldPath: str


class LocalObjectReference(TypedDict, total=False):
    name: str


# ------------------------------------------------------------ selectors
class ObjectFieldSelector(TypedDict, total=False):
    apiVersion: str
    fieldPath: Required[str]


class ResourceFieldSelector(TypedDict, total=False):
    containerName: str
    resource: Required[str]
    divisor: Quantity


class KeySelector(TypedDict, total=False):
    """configMapKeyRef and secretKeyRef: two API types of one shape."""

    name: str
    key: Required[str]
    optional: bool


ConfigMapKeySelector = KeySelector
SecretKeySelector = KeySelector


class KeyToPath(TypedDict, total=False):
    key: Required[str]
    path: Required[str]
    mode: int


# ------------------------------------------------------------ container
class ContainerPort(TypedDict, total=False):
    name: str
    hostPort: int
    containerPort: Required[int]
    protocol: str
    hostIP: str


class EnvVarSource(TypedDict, total=False):
    fieldRef: ObjectFieldSelector
    resourceFieldRef: ResourceFieldSelector
    configMapKeyRef: ConfigMapKeySelector
    secretKeyRef: SecretKeySelector


class EnvVar(TypedDict, total=False):
    name: Required[str]
    value: str
    valueFrom: EnvVarSource


class EnvSourceRef(TypedDict, total=False):
    """envFrom's configMapRef and secretRef: two API types of one shape."""

    name: str
    optional: bool


ConfigMapEnvSource = EnvSourceRef
SecretEnvSource = EnvSourceRef


class EnvFromSource(TypedDict, total=False):
    prefix: str
    configMapRef: ConfigMapEnvSource
    secretRef: SecretEnvSource


class ResourceRequirements(TypedDict, total=False):
    limits: ResourceList
    requests: ResourceList


class VolumeMount(TypedDict, total=False):
    name: Required[str]
    readOnly: bool
    recursiveReadOnly: str
    mountPath: Required[str]
    subPath: str
    mountPropagation: str
    subPathExpr: str


class VolumeDevice(TypedDict, total=False):
    name: Required[str]
    devicePath: Required[str]


class ExecAction(TypedDict, total=False):
    command: list[str]


class HTTPHeader(TypedDict):
    name: str
    value: str


class HTTPGetAction(TypedDict, total=False):
    path: str
    port: Required[IntOrString]
    host: str
    scheme: str
    httpHeaders: list[HTTPHeader]


class TCPSocketAction(TypedDict, total=False):
    port: Required[IntOrString]
    host: str


class GRPCAction(TypedDict, total=False):
    port: Required[int]
    service: str


class SleepAction(TypedDict):
    seconds: int


class LifecycleHandler(TypedDict, total=False):
    exec: ExecAction
    httpGet: HTTPGetAction
    tcpSocket: TCPSocketAction
    sleep: SleepAction


class Lifecycle(TypedDict, total=False):
    postStart: LifecycleHandler
    preStop: LifecycleHandler
    stopSignal: str


class Probe(LifecycleHandler, total=False):
    grpc: GRPCAction
    initialDelaySeconds: int
    timeoutSeconds: int
    periodSeconds: int
    successThreshold: int
    failureThreshold: int
    terminationGracePeriodSeconds: int


class Capabilities(TypedDict, total=False):
    add: list[str]
    drop: list[str]


class SELinuxOptions(TypedDict, total=False):
    user: str
    role: str
    type: str
    level: str


class SecurityProfile(TypedDict, total=False):
    """seccompProfile and appArmorProfile: two API types of one shape."""

    type: Required[str]
    localhostProfile: str


SeccompProfile = SecurityProfile
AppArmorProfile = SecurityProfile


class SecurityContext(TypedDict, total=False):
    capabilities: Capabilities
    privileged: bool
    seLinuxOptions: SELinuxOptions
    runAsUser: int
    runAsGroup: int
    runAsNonRoot: bool
    readOnlyRootFilesystem: bool
    allowPrivilegeEscalation: bool
    procMount: str
    seccompProfile: SeccompProfile
    appArmorProfile: AppArmorProfile


class ContainerResizePolicy(TypedDict, total=False):
    resourceName: Required[str]  # cpu or memory
    restartPolicy: Required[str]  # NotRequired or RestartContainer


class Container(TypedDict, total=False):
    name: Required[str]
    image: str
    command: list[str]
    args: list[str]
    workingDir: str
    ports: list[ContainerPort]
    envFrom: list[EnvFromSource]
    env: list[EnvVar]
    resources: ResourceRequirements
    resizePolicy: list[ContainerResizePolicy]
    restartPolicy: str  # init containers only: Always makes a sidecar
    volumeMounts: list[VolumeMount]
    volumeDevices: list[VolumeDevice]
    livenessProbe: Probe
    readinessProbe: Probe
    startupProbe: Probe
    lifecycle: Lifecycle
    terminationMessagePath: str
    terminationMessagePolicy: str
    imagePullPolicy: str
    securityContext: SecurityContext
    stdin: bool
    stdinOnce: bool
    tty: bool


class EphemeralContainer(Container, total=False):
    targetContainerName: str


# --------------------------------------------------------------- volumes
class HostPathVolumeSource(TypedDict, total=False):
    path: Required[str]
    type: str


class EmptyDirVolumeSource(TypedDict, total=False):
    medium: str
    sizeLimit: Quantity


class SecretVolumeSource(TypedDict, total=False):
    secretName: str
    items: list[KeyToPath]
    defaultMode: int
    optional: bool


class ConfigMapVolumeSource(TypedDict, total=False):
    name: str
    items: list[KeyToPath]
    defaultMode: int
    optional: bool


class DownwardAPIVolumeFile(TypedDict, total=False):
    path: Required[str]
    fieldRef: ObjectFieldSelector
    resourceFieldRef: ResourceFieldSelector
    mode: int


class DownwardAPIVolumeSource(TypedDict, total=False):
    items: list[DownwardAPIVolumeFile]
    defaultMode: int


class ServiceAccountTokenProjection(TypedDict, total=False):
    audience: str
    expirationSeconds: int
    path: Required[str]


class KeysProjection(TypedDict, total=False):
    """A projected volume's secret and configMap sources: one shape."""

    name: str
    items: list[KeyToPath]
    optional: bool


SecretProjection = KeysProjection
ConfigMapProjection = KeysProjection


class VolumeProjection(TypedDict, total=False):
    secret: SecretProjection
    downwardAPI: DownwardAPIVolumeSource
    configMap: ConfigMapProjection
    serviceAccountToken: ServiceAccountTokenProjection


class ProjectedVolumeSource(TypedDict, total=False):
    sources: list[VolumeProjection]
    defaultMode: int


class PersistentVolumeClaimVolumeSource(TypedDict, total=False):
    claimName: Required[str]
    readOnly: bool


class CSIVolumeSource(TypedDict, total=False):
    driver: Required[str]
    readOnly: bool
    fsType: str
    volumeAttributes: dict[str, str]
    nodePublishSecretRef: LocalObjectReference


class Volume(TypedDict, total=False):
    name: Required[str]
    hostPath: HostPathVolumeSource
    emptyDir: EmptyDirVolumeSource
    secret: SecretVolumeSource
    configMap: ConfigMapVolumeSource
    downwardAPI: DownwardAPIVolumeSource
    projected: ProjectedVolumeSource
    persistentVolumeClaim: PersistentVolumeClaimVolumeSource
    csi: CSIVolumeSource
    ephemeral: dict[str, Any]  # its volumeClaimTemplate is the controller's business
    # Not API fields: what the PVC plugin hands the plugin of the bound PV.
    persistentVolume: dict[str, Any]
    readOnly: bool
    claim: ClaimRef


class ClaimRef(TypedDict):
    namespace: str
    name: str


# ------------------------------------------------------------------- pod
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
    stopSignal: str


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


class NodeStatus(TypedDict, total=False):
    capacity: ResourceList
    allocatable: ResourceList


class Node(TypedDict, total=False):
    """What admission reads of a Node: its name, labels, taints and allocatable."""

    apiVersion: str
    kind: str
    metadata: Required[ObjectMeta]
    spec: NodeSpec
    status: NodeStatus


class Secret(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]  # base64, as the API sends it
    type: str
    immutable: bool


class ConfigMap(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]
    binaryData: dict[str, str]  # base64
    immutable: bool
