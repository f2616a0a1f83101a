"""A pod's Container as core/v1 spells it, with its ports, env, probes,
lifecycle hooks, resources and security context.
"""

from __future__ import annotations

from typing import Required, TypedDict

from kubelet.core_v1.meta import (
    ConfigMapKeySelector,
    IntOrString,
    ObjectFieldSelector,
    ResourceFieldSelector,
    ResourceList,
    SecretKeySelector,
)


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


class ResourceClaimRef(TypedDict, total=False):
    name: Required[str]  # one of the pod's spec.resourceClaims
    request: str


class ResourceRequirements(TypedDict, total=False):
    limits: ResourceList
    requests: ResourceList
    claims: list[ResourceClaimRef]


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
