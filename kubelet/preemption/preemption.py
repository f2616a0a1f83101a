"""Critical pod preemption at admission (pkg/kubelet/preemption).

A critical pod (static, mirror, or of system-critical priority) that the fit
check refuses for nothing but insufficient resources is admitted after the
kubelet evicts a set of preemptable pods whose requests cover what is missing.
The set is chosen to hurt least: BestEffort pods before Burstable before
Guaranteed, and within each class the fewest pods (each round takes the pod
that covers most of what is still missing, the smaller request on a tie).
Victims are reported Failed with reason Preempting and the DisruptionTarget
condition, get a Preempting event, and count in kubelet_preemptions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kubelet import metrics
from kubelet.events import Recorder
from kubelet.lifecycle.predicate import InsufficientResource
from kubelet.lifecycle.rejection import AdmissionRecoveryError, Rejection
from kubelet.resourcehelper import resource_request
from kubelet.types import Pod, PodCondition, full_name, is_critical, object_ref, qos_class, uid

log = logging.getLogger(__name__)

# events.PreemptContainer, and the texts a victim's status carries.
REASON = "Preempting"
MESSAGE = "Preempted in order to admit critical pod"
CONDITION_MESSAGE = "Pod was preempted by Kubelet to accommodate a critical pod."


class PreemptionError(AdmissionRecoveryError):
    """No set of preemptable pods frees what the critical pod needs."""


@dataclass(frozen=True)
class Requirement:
    """What is still missing of one resource (cpu in millicores, pods as a count)."""

    resource: str
    quantity: int


def request(pod: Pod, resource: str) -> int:
    """GetResourceRequest: every pod frees one pod slot."""
    return 1 if resource == "pods" else resource_request(pod, resource)


def subtract(reqs: Sequence[Requirement], pods: Iterable[Pod]) -> list[Requirement]:
    """What would still be missing with these pods gone."""
    gone = list(pods)
    out = []
    for r in reqs:
        left = r.quantity
        for p in gone:
            left -= request(p, r.resource)
            if left <= 0:
                break
        if left > 0:
            out.append(Requirement(r.resource, left))
    return out


def distance(reqs: Sequence[Requirement], pod: Pod) -> float:
    """How far the pod's requests fall short, each resource weighed as the
    fraction of it left missing (so magnitudes do not matter)."""
    d = 0.0
    for r in reqs:
        left = r.quantity - request(pod, r.resource)
        if left > 0:
            d += (left / r.quantity) ** 2
    return d


def smaller_request(a: Pod, b: Pod) -> bool:
    """a asks less than b: memory decides, then cpu; True when equal."""
    for res in ("memory", "cpu"):
        ra, rb = request(a, res), request(b, res)
        if ra != rb:
            return ra < rb
    return True


def preemptable(preemptor: Pod, preemptee: Pod) -> bool:
    """A critical pod preempts non-critical ones; otherwise only a strictly
    higher priority does, when both pods have one."""
    if is_critical(preemptor) and not is_critical(preemptee):
        return True
    a, b = preemptor["spec"].get("priority"), preemptee["spec"].get("priority")
    return a is not None and b is not None and int(a) > int(b)


def by_distance(pods: list[Pod], reqs: list[Requirement]) -> list[Pod]:
    """Take the closest pod to what is missing until nothing is. The chosen
    pod's slot is filled by the last one, as upstream, so ties between equal
    pods break the same way."""
    pods, chosen = list(pods), []
    while reqs:
        if not pods:
            raise PreemptionError(
                f"no set of running pods found to reclaim resources: {_fmt(reqs)}"
            )
        best, best_d = 0, float(len(reqs) + 1)
        for i, p in enumerate(pods):
            d = distance(reqs, p)
            if d < best_d or (d == best_d and smaller_request(p, pods[best])):
                best, best_d = i, d
        victim = pods[best]
        reqs = subtract(reqs, [victim])
        chosen.append(victim)
        pods[best] = pods[-1]
        pods.pop()
    return chosen


def pods_to_preempt(pod: Pod, pods: Sequence[Pod], reqs: list[Requirement]) -> list[Pod]:
    """getPodsToPreempt: the Guaranteed pods needed were every lower class gone,
    then the Burstable ones needed beside those and all BestEffort, then the
    BestEffort ones needed beside both: the least disruptive classes give first."""
    classes: dict[str, list[Pod]] = {"BestEffort": [], "Burstable": [], "Guaranteed": []}
    for p in pods:
        if preemptable(pod, p):
            classes[qos_class(p)].append(p)
    best_effort, burstable, guaranteed = classes.values()
    unmet = subtract(reqs, best_effort + burstable + guaranteed)
    if unmet:
        raise PreemptionError(f"no set of running pods found to reclaim resources: {_fmt(unmet)}")
    g = by_distance(guaranteed, subtract(reqs, best_effort + burstable))
    b = by_distance(burstable, subtract(reqs, best_effort + g))
    be = by_distance(best_effort, subtract(reqs, b + g))
    return be + b + g


def _fmt(reqs: Iterable[Requirement]) -> str:
    return "[" + "".join(f"(res: {r.resource}, q: {r.quantity}), " for r in reqs) + "]"


class KillFn(Protocol):
    """Kill the pod with its own grace period and report it Failed with this
    reason, message and condition (the eviction path's kill)."""

    def __call__(self, pod: Pod, reason: str, message: str, condition: PodCondition) -> None: ...


def disruption_condition() -> PodCondition:
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": CONDITION_MESSAGE,
    }


@dataclass(frozen=True)
class CriticalPodAdmissionHandler:
    """The predicate admitter's failure handler (AdmissionFailureHandler)."""

    active_pods: Callable[[], list[Pod]]
    kill: KillFn
    # The admitted pod starts only once these pods have stopped (or their kill
    # timed out), as upstream's blocking kill holds admission.
    start_after: Callable[[Pod, list[Pod]], None]
    recorder: Recorder | None

    def handle_admission_failure(self, pod: Pod, reasons: list[Rejection]) -> list[Rejection]:
        """The reasons that still refuse the pod: none once the pods to preempt
        are killed. Raises PreemptionError when no set of pods would do."""
        if not is_critical(pod):
            return reasons
        others = [r for r in reasons if not isinstance(r, InsufficientResource)]
        if others:
            return others
        reqs = [
            Requirement(r.resource, r.requested - (r.capacity - r.used))
            for r in reasons
            if isinstance(r, InsufficientResource)
        ]
        me = uid(pod)
        candidates = [p for p in self.active_pods() if uid(p) != me]
        try:
            victims = pods_to_preempt(pod, candidates, reqs)
        except PreemptionError as err:
            raise PreemptionError(
                f"preemption: error finding a set of pods to preempt: {err}"
            ) from None
        for v in victims:
            if self.recorder is not None:
                self.recorder.event(object_ref(v), "Warning", REASON, MESSAGE)
            log.info("Preempting pod %s to free %s for critical pod %s", full_name(v), _fmt(reqs),
                     full_name(pod))  # fmt: skip
            self.kill(v, REASON, MESSAGE, disruption_condition())
            metrics.PREEMPTIONS.labels(reqs[0].resource if reqs else "").inc()
        if victims:
            self.start_after(pod, victims)
        return []
