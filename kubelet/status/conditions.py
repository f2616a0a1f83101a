"""The pod conditions the kubelet writes (the condition generators of
upstream's status/generate.go): Initialized, ContainersReady and Ready with
the readiness gates, and which conditions are the kubelet's at all."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet import types as v1
from kubelet.status.generation import condition_observed_generation
from kubelet.types import TERMINAL_PHASES, Container, Pod, is_sidecar
from kubelet.util.gotime import meta_now

# Pod conditions the kubelet owns; the others (readiness gates' conditions,
# DisruptionTarget, anything a controller adds) are kept as the API has them.
KUBELET_CONDITIONS = frozenset(
    {
        "PodScheduled",
        "Ready",
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
        "PodResizeInProgress",
        "PodResizePending",
    }
)
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"
# Set once by whoever disrupts the pod (eviction, shutdown, preemption) and
# carried from the kubelet's previous status, never regenerated.
DISRUPTION_TARGET = "DisruptionTarget"


def readiness_gates_unready(pod: Pod, conditions: list[v1.PodCondition]) -> list[str]:
    """Why the pod's readiness gates hold it unready (one message per gate,
    upstream's wording), given the pod's current conditions."""
    gates = pod["spec"].get("readinessGates") or []
    if not gates:
        return []
    by_type = {c.get("type"): c for c in conditions}
    out = []
    for g in gates:
        t = g.get("conditionType", "")
        c = by_type.get(t)
        if c is None:
            out.append(f'corresponding condition of pod readiness gate "{t}" does not exist.')
        elif c.get("status") != "True":
            out.append(
                f'the status of pod readiness gate "{t}" is not "True", but {c.get("status")}'
            )
    return out


def need_to_reconcile_pod_readiness(pod: Pod) -> bool:
    """A pod with readiness gates whose API Ready condition no longer says what
    the gates and its containers say (NeedToReconcilePodReadiness): someone set
    a gate's condition, and the kubelet must write Ready again."""
    if not pod["spec"].get("readinessGates"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    by_type = {c.get("type"): c for c in conditions}
    ready = by_type.get("Ready")
    if ready is None:
        return False
    containers = by_type.get("ContainersReady")
    want: tuple[str | None, str | None]
    if containers is None or containers.get("status") != "True":
        want = (
            (containers.get("status"), containers.get("message"))
            if containers is not None
            else (None, None)
        )
    else:
        gates = readiness_gates_unready(pod, conditions)
        want = ("False", ", ".join(gates)) if gates else ("True", None)
    return (ready.get("status"), ready.get("message")) != want


def foreign_conditions(
    api_conditions: list[v1.PodCondition], disruption: v1.PodCondition | None
) -> list[v1.PodCondition]:
    """The conditions others own, as the API has them, with the DisruptionTarget
    the kubelet set itself (on eviction) taken from its own previous status: the
    API copy may not carry it yet."""
    out = [c for c in api_conditions if c.get("type") not in KUBELET_CONDITIONS]
    if disruption is None:
        return out
    at = next((i for i, c in enumerate(out) if c.get("type") == DISRUPTION_TARGET), None)
    if at is None:
        return [*out, disruption]
    out[at] = disruption
    return out


@dataclass(frozen=True)
class Conditions:
    """Makes the kubelet's pod conditions from its previous status: a condition
    keeps its transition time while its status stays the same."""

    old: list[v1.PodCondition]
    by_type: dict[str, v1.PodCondition]  # the old conditions by type
    generation: int
    tracking: bool

    @classmethod
    def of(cls, old: list[v1.PodCondition], gen: int, tracking: bool) -> Conditions:
        return cls(old, {c["type"]: c for c in old}, gen, tracking)

    def make(self, ctype: str, ok: bool, reason: str = "", message: str = "") -> v1.PodCondition:
        status_s = "True" if ok else "False"
        before = self.by_type.get(ctype)
        c: v1.PodCondition = {
            "type": ctype,
            "status": status_s,
            "lastProbeTime": None,
            "lastTransitionTime": before.get("lastTransitionTime") or meta_now()
            if before and before["status"] == status_s
            else meta_now(),
        }
        observed = condition_observed_generation(self.old, self.generation, ctype, self.tracking)
        if observed:
            c["observedGeneration"] = observed
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        return c


def initialized(
    cond: Conditions,
    phase: str,
    init_specs: list[Container],
    init_st: list[v1.ContainerStatus],
    st: list[v1.ContainerStatus],
) -> v1.PodCondition:
    """Initialized (GeneratePodInitializedCondition): regular init containers
    ready, sidecars started; true for good once a regular container ran."""
    incomplete = [
        s["name"]
        for s, c in zip(init_st, init_specs, strict=True)
        if not (s["started"] if is_sidecar(c) else s["ready"])
    ]
    regular_started = any("running" in s["state"] or "terminated" in s["state"] for s in st)
    if phase == "Succeeded":
        return cond.make("Initialized", True, "PodCompleted")
    if regular_started or not incomplete:
        return cond.make("Initialized", True)
    return cond.make(
        "Initialized",
        False,
        "ContainersNotInitialized",
        f"containers with incomplete status: [{' '.join(incomplete)}]",
    )


def readiness(
    phase: str,
    init_specs: list[Container],
    init_st: list[v1.ContainerStatus],
    st: list[v1.ContainerStatus],
) -> tuple[bool, str, str]:
    """ContainersReady's (ok, reason, message), Ready's before the readiness
    gates: sidecars and regular containers count, never ephemeral ones; a
    finished pod is not ready."""
    unready = [
        s["name"]
        for s, c in zip(init_st, init_specs, strict=True)
        if is_sidecar(c) and not s["ready"]
    ] + [s["name"] for s in st if not s["ready"]]
    if phase in TERMINAL_PHASES:
        return (False, "PodCompleted" if phase == "Succeeded" else "PodFailed", "")
    if unready:
        return (
            False,
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(unready)}]",
        )
    return (True, "", "")


def ready_condition(
    cond: Conditions,
    pod: Pod,
    api_conditions: list[v1.PodCondition],
    containers_ready: tuple[bool, str, str],
) -> v1.PodCondition:
    """Ready (GeneratePodReadyCondition): ContainersReady's answer, held False
    while a readiness gate's condition is missing or not True."""
    if containers_ready[0]:
        gates = readiness_gates_unready(pod, api_conditions)
        if gates:
            return cond.make("Ready", False, READINESS_GATES_NOT_READY, ", ".join(gates))
    return cond.make("Ready", *containers_ready)
