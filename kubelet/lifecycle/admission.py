"""The pod admission chain (canAdmitPod over the kubelet's admit handlers, in
upstream's order): node pressure, node shutdown, sysctls, the resource
managers, the fit check, AppArmor, then the pod's features.

The first handler that refuses gives the reason; a pod that already finished
is neither counted nor admitted again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kubelet.cm.resource_managers import ResourceManagers
from kubelet.lifecycle.apparmor import Validator as AppArmorValidator
from kubelet.lifecycle.features import admit_pod_features
from kubelet.lifecycle.predicate import Admitter
from kubelet.lifecycle.rejection import AdmissionRecoveryError, Rejection
from kubelet.node_lister import NodeLister, with_allocatable
from kubelet.sysctl import SysctlAllowlist
from kubelet.types import TERMINAL_PHASES, Node, Pod, uid


class AdmitHandler(Protocol):
    """One link of the chain that sits above this layer (eviction, node shutdown)."""

    def admit(self, pod: Pod) -> Rejection | None: ...


class AdmissionFailureHandler(Protocol):
    """Given every reason the fit check refused a pod, frees what it can (the
    critical pod preemption handler) and returns the reasons that still hold;
    raises an error it could not recover from."""

    def handle_admission_failure(self, pod: Pod, reasons: list[Rejection]) -> list[Rejection]: ...


@dataclass(frozen=True)
class PodAdmitter:
    eviction: AdmitHandler
    shutdown: AdmitHandler | None  # None without graceful node shutdown
    sysctls: SysctlAllowlist
    resource_managers: ResourceManagers
    lister: NodeLister
    fit: Admitter  # counts what it admits until release()
    apparmor: AppArmorValidator
    pod_level_resources: bool  # the PodLevelResources gate
    on_fit_failure: AdmissionFailureHandler | None = None

    def admit(self, pod: Pod) -> Rejection | None:
        """canAdmitPod: pods that already finished are not counted nor re-admitted."""
        st = (pod.get("status") or {}).get("phase")
        if st in TERMINAL_PHASES:
            return None
        pressure = self.eviction.admit(pod)
        if pressure is not None:
            return pressure
        if self.shutdown is not None and (refused := self.shutdown.admit(pod)) is not None:
            return refused
        forbidden = self.sysctls.admit(pod)
        if forbidden is not None:
            return forbidden
        # The topology manager allocates CPUs and memory (before the fit check, as upstream).
        unaligned = self.resource_managers.admit(pod)
        if unaligned is not None:
            return unaligned
        # Devices just allocated count as allocatable even before their plugin
        # lists them again (UpdatePluginResources).
        floor = self.resource_managers.devices.allocated_counts(uid(pod))
        node = with_allocatable(self.lister.get(), floor)
        try:
            refused = self.fit.admit(uid(pod), pod, node)
            if refused is not None and self.on_fit_failure is not None:
                refused = self._recover(self.on_fit_failure, pod, node)
        except ValueError as err:
            return Rejection("UnexpectedAdmissionError", f"invalid resource requests: {err}")
        # AppArmor comes after the fit check, as upstream's handlers; the fit
        # check counted the pod, so a refusal here gives its share back.
        if refused is None and (refused := self._admit_after_fit(pod)) is not None:
            self.fit.release(uid(pod))
        return refused

    def _recover(self, handler: AdmissionFailureHandler, pod: Pod, node: Node) -> Rejection | None:
        """The failure handler sees every reason; once it has freed room (the
        preempted pods no longer count) the pod is counted as admitted."""
        try:
            left = handler.handle_admission_failure(pod, self.fit.failures(pod, node))
        except AdmissionRecoveryError as err:
            return Rejection(
                "UnexpectedAdmissionError",
                f"Unexpected error while attempting to recover from admission failure: {err}",
            )
        if left:
            return left[0]
        # Admitted, as upstream, without checking the fit again.
        self.fit.count(uid(pod), pod, node)
        return None

    def _admit_after_fit(self, pod: Pod) -> Rejection | None:
        """AppArmor, then the pod-features handler, as upstream's order."""
        refused = self.apparmor.admit(pod)
        if refused is None:
            refused = admit_pod_features(pod, self.pod_level_resources)
        return refused
