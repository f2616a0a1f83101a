"""The topology manager (pkg/kubelet/cm/topologymanager): a pod admit handler
that asks every hint provider (CPU manager, memory manager; device plugins and
DRA later) where a pod's or container's resources could live, merges the
answers under the configured policy, refuses the pod when the policy says the
result is not good enough, and otherwise has each provider allocate against
the chosen NUMA affinity.

Scopes: "container" merges and allocates one container at a time; "pod" merges
the whole pod's hints once and gives every container the same affinity.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from kubelet.cm import metrics
from kubelet.cm.containermap import ContainerMap
from kubelet.cm.topologymanager.policy import (
    POLICIES,
    POLICY_NONE,
    POLICY_SINGLE_NUMA_NODE,
    NUMAInfo,
    Policy,
    PolicyOptions,
    ProviderHints,
    TopologyHint,
    new_policy_options,
)
from kubelet.features import FeatureGate
from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Container, Pod, containers_of, uid

log = logging.getLogger(__name__)


SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPES = (SCOPE_CONTAINER, SCOPE_POD)

ERROR_TOPOLOGY_AFFINITY = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
ERROR_UNEXPECTED = "UnexpectedAdmissionError"


class AdmissionError(Exception):
    """An allocation failure with its own admission reason (Type() upstream),
    such as SMTAlignmentError; any other exception is an UnexpectedAdmissionError."""

    reason = ERROR_UNEXPECTED


class HintProvider(Protocol):
    """What a resource manager offers the topology manager. The CPU and memory
    managers implement it; device plugins and DRA plug in the same way."""

    def get_topology_hints(self, pod: Pod, container: Container) -> ProviderHints: ...

    def get_pod_topology_hints(self, pod: Pod) -> ProviderHints: ...

    def allocate(self, pod: Pod, container: Container) -> None:
        """Allocate for one container against the affinity the Store holds;
        raises (AdmissionError for a reason of its own) when it cannot."""
        ...


class Store(Protocol):
    """What the providers read back: the affinity chosen for a container."""

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint: ...

    @property
    def policy_name(self) -> str: ...


def admission_rejection(err: Exception) -> Rejection:
    """GetPodAdmitResult: the error's own reason, else UnexpectedAdmissionError."""
    if isinstance(err, AdmissionError) and err.reason != ERROR_UNEXPECTED:
        return Rejection(err.reason, str(err))
    return Rejection(ERROR_UNEXPECTED, f"Allocate failed due to {err}, which is unexpected")


def init_and_app_containers(pod: Pod) -> list[Container]:
    """The containers resources are aligned for, in upstream's order: init
    containers first, then the app containers; ephemeral ones get none."""
    spec = pod["spec"]
    return [*containers_of(spec, "initContainers"), *containers_of(spec, "containers")]


class TopologyManager:
    """Manager + Scope upstream: admission, the chosen affinities, the providers."""

    def __init__(self, policy: Policy, scope: str) -> None:
        self.policy = policy
        self.scope = scope if policy.name != POLICY_NONE else "none"
        self.providers: list[HintProvider] = []
        # pod UID -> container name -> the hint chosen at admission
        self._hints: dict[str, dict[str, TopologyHint]] = {}
        self._containers = ContainerMap()

    @property
    def policy_name(self) -> str:
        return self.policy.name

    def add_hint_provider(self, provider: HintProvider) -> None:
        self.providers.append(provider)

    def get_affinity(self, pod_uid: str, container_name: str) -> TopologyHint:
        return self._hints.get(pod_uid, {}).get(container_name, TopologyHint(None, False))

    def _set_affinity(self, pod_uid: str, container_name: str, hint: TopologyHint) -> None:
        self._hints.setdefault(pod_uid, {})[container_name] = hint

    def add_container(self, pod: Pod, container: Container, container_id: str) -> None:
        if self.scope != "none":  # policy none keeps no hints
            self._containers.add(uid(pod), container["name"], container_id)

    def remove_pod(self, pod_uid: str) -> None:
        """The pod is gone: its hints and container IDs go too."""
        if self._hints.pop(pod_uid, None) is None:
            return
        for pod, name in self._containers.refs():
            if pod == pod_uid:
                self._containers.remove_by_container_ref(pod, name)

    def remove_container(self, container_id: str) -> None:
        """A stopped container's hint goes once no other instance of it is known."""
        ref = self._containers.get_container_ref(container_id)
        if ref is None:
            return
        pod_uid, name = ref
        self._containers.remove_by_container_id(container_id)
        if self._containers.get_container_id(pod_uid, name) is None:
            hints = self._hints.get(pod_uid, {})
            hints.pop(name, None)
            if not hints:
                self._hints.pop(pod_uid, None)

    def admit(self, pod: Pod) -> Rejection | None:
        """Admit, counted and timed (in milliseconds) for every pod, as upstream."""
        metrics.TOPOLOGY_MANAGER_ADMISSION_REQUESTS.inc()
        started = time.perf_counter()
        try:
            return self._admit(pod)
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            metrics.TOPOLOGY_MANAGER_ADMISSION_DURATION.observe(elapsed_ms)

    def _alignment(self, scope: str, aligned: bool) -> None:
        """container_aligned_compute_resources_(failure_)count: only the
        single-numa-node policy guarantees alignment (IsAlignmentGuaranteed)."""
        if self.policy.name == POLICY_SINGLE_NUMA_NODE:
            counter = (
                metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES
                if aligned
                else metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE
            )
            counter.inc(scope, metrics.ALIGNED_NUMA_NODE)

    def _admit(self, pod: Pod) -> Rejection | None:
        if self.scope == SCOPE_POD:
            return self._admit_pod(pod)
        if self.scope == SCOPE_CONTAINER:
            return self._admit_containers(pod)
        for c in init_and_app_containers(pod):  # policy none: allocate, no alignment
            rejection = self._allocate(pod, c)
            if rejection is not None:
                return rejection
        return None

    def _allocate(self, pod: Pod, container: Container) -> Rejection | None:
        for provider in self.providers:
            try:
                provider.allocate(pod, container)
            except AdmissionError as err:
                return admission_rejection(err)
            except Exception as err:  # a bug, but still this pod's rejection only
                log.exception("Allocate for %s/%s failed", uid(pod), container.get("name"))
                return admission_rejection(err)
        return None

    def _admit_containers(self, pod: Pod) -> Rejection | None:
        for c in init_and_app_containers(pod):
            hints = [p.get_topology_hints(pod, c) for p in self.providers]
            best, admit = self.policy.merge(hints)
            log.info("Best TopologyHint for %s/%s: %s", uid(pod), c.get("name"), best)
            if not admit:
                self._alignment(metrics.ALIGN_SCOPE_CONTAINER, False)
                metrics.TOPOLOGY_MANAGER_ADMISSION_ERRORS.inc()
                return Rejection(ERROR_TOPOLOGY_AFFINITY, TOPOLOGY_AFFINITY_MESSAGE)
            self._set_affinity(uid(pod), c["name"], best)
            rejection = self._allocate(pod, c)
            if rejection is not None:
                metrics.TOPOLOGY_MANAGER_ADMISSION_ERRORS.inc()
                return rejection
            self._alignment(metrics.ALIGN_SCOPE_CONTAINER, True)
        return None

    def _admit_pod(self, pod: Pod) -> Rejection | None:
        hints = [p.get_pod_topology_hints(pod) for p in self.providers]
        best, admit = self.policy.merge(hints)
        log.info("Best TopologyHint for pod %s: %s", uid(pod), best)
        if not admit:
            self._alignment(metrics.ALIGN_SCOPE_POD, False)
            metrics.TOPOLOGY_MANAGER_ADMISSION_ERRORS.inc()
            return Rejection(ERROR_TOPOLOGY_AFFINITY, TOPOLOGY_AFFINITY_MESSAGE)
        for c in init_and_app_containers(pod):
            self._set_affinity(uid(pod), c["name"], best)
            rejection = self._allocate(pod, c)
            if rejection is not None:
                metrics.TOPOLOGY_MANAGER_ADMISSION_ERRORS.inc()
                return rejection
        self._alignment(metrics.ALIGN_SCOPE_POD, True)
        return None


def new_topology_manager(
    nodes: Sequence[int],
    distances: Mapping[int, Sequence[int]],
    policy_name: str,
    scope: str,
    options: Mapping[str, str],
    gates: FeatureGate,
) -> TopologyManager:
    """NewManager: ValueError with upstream's message for a setting it refuses."""
    if policy_name == POLICY_NONE:
        return TopologyManager(Policy(POLICY_NONE, NUMAInfo(tuple(nodes)), PolicyOptions()), scope)
    opts = new_policy_options(options, gates)
    dist: dict[int, tuple[int, ...]] = {}
    if opts.prefer_closest_numa:
        for n in nodes:
            if not distances.get(n):
                raise ValueError(
                    "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
                )
            dist[n] = tuple(distances[n])
    if len(nodes) > opts.max_allowable_numa_nodes:
        raise ValueError(
            f"unsupported on machines with more than {opts.max_allowable_numa_nodes} NUMA Nodes"
        )
    if policy_name not in POLICIES:
        raise ValueError(f'unknown policy: "{policy_name}"')
    if scope not in SCOPES:
        raise ValueError(f'unknown scope: "{scope}"')
    # initializeMetrics (not with the none policy, as upstream): the series exist at 0.
    for label in (metrics.ALIGN_SCOPE_CONTAINER, metrics.ALIGN_SCOPE_POD):
        metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES.touch(label, metrics.ALIGNED_NUMA_NODE)
        metrics.CONTAINER_ALIGNED_COMPUTE_RESOURCES_FAILURE.touch(label, metrics.ALIGNED_NUMA_NODE)
    return TopologyManager(Policy(policy_name, NUMAInfo(tuple(nodes), dist), opts), scope)
