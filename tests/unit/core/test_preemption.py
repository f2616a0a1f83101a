"""Critical pod preemption (kubelet/preemption): the choice of pods against the
facts of upstream's preemption tests, properties of that choice, and what the
handler does to the pods it chose."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubelet import metrics
from kubelet.lifecycle.predicate import Admitter, InsufficientResource
from kubelet.lifecycle.rejection import Rejection
from kubelet.preemption.preemption import (
    CriticalPodAdmissionHandler,
    PreemptionError,
    Requirement,
    distance,
    pods_to_preempt,
    subtract,
)
from kubelet.types import Node, PodCondition, qos_class

MI = 2**20
CRITICAL = 2_000_000_000


def mkpod(name: str, cpu_m: int = 0, mem_mi: int = 0, limits: bool = False, **spec: Any) -> dict:
    req = {k: v for k, v in (("cpu", f"{cpu_m}m" if cpu_m else ""), ("memory", f"{mem_mi}Mi" if mem_mi else "")) if v}  # fmt: skip
    res: dict[str, Any] = {"requests": req}
    if limits:
        res["limits"] = dict(req)
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": {}},
        "spec": {"containers": [{"name": "c", "resources": res}], **spec},
    }


# upstream's getTestPods, as facts
PODS = {
    "tiny": mkpod("tiny", 1, 1),
    "bestEffort": mkpod("bestEffort"),
    "cluster-critical": mkpod("cluster-critical", 100, 100, priority=CRITICAL),
    "node-critical": mkpod("node-critical", 100, 100, priority=CRITICAL + 100),
    "burstable": mkpod("burstable", 100, 100),
    "guaranteed": mkpod("guaranteed", 100, 100, limits=True),
    "high-request-burstable": mkpod("high-request-burstable", 300, 300),
    "high-request-guaranteed": mkpod("high-request-guaranteed", 300, 300, limits=True),
}


def reqs(cpu_m: int = 0, mem_mi: int = 0, pods: int = 0) -> list[Requirement]:
    out = [Requirement("cpu", cpu_m), Requirement("memory", mem_mi * MI), Requirement("pods", pods)]
    return [r for r in out if r.quantity > 0]


ALL5 = [
    "bestEffort",
    "burstable",
    "high-request-burstable",
    "guaranteed",
    "high-request-guaranteed",
]
# (preemptor, pods, requirement (cpu m, memory Mi, pods), victims or None for an error)
CASES = [
    ("cluster-critical", [], (0, 0, 0), []),
    ("cluster-critical", [], (0, 0, 1), None),
    ("cluster-critical", ["burstable"], (100, 100, 1), ["burstable"]),
    ("cluster-critical", ["burstable"], (200, 200, 2), None),
    ("cluster-critical", ["burstable", "bestEffort"], (0, 0, 1), ["bestEffort"]),
    ("cluster-critical", ["burstable", "guaranteed"], (0, 0, 1), ["burstable"]),
    ("cluster-critical", ["bestEffort", "high-request-burstable", "burstable"], (100, 100, 0),
     ["burstable"]),
    ("cluster-critical", ["bestEffort", "burstable", "high-request-burstable"], (150, 150, 0),
     ["high-request-burstable"]),
    ("cluster-critical", ALL5, (350, 350, 0), ["burstable", "high-request-burstable"]),
    ("cluster-critical", ALL5, (0, 550, 0), ["high-request-burstable", "high-request-guaranteed"]),
    ("node-critical", ["cluster-critical"], (100, 0, 0), ["cluster-critical"]),
    ("cluster-critical", ["node-critical"], (100, 0, 0), None),
    # evictPodsToFreeRequests' cases: critical pods and requests that free nothing
    ("cluster-critical", ["cluster-critical"], (0, 0, 1), None),
    ("cluster-critical", ["bestEffort"], (0, 1, 0), None),
]  # fmt: skip


@pytest.mark.parametrize(("preemptor", "pods", "need", "victims"), CASES)
def test_pods_to_preempt_as_upstreams_cases(
    preemptor: str, pods: list[str], need: tuple[int, int, int], victims: list[str] | None
) -> None:
    given_pods = [PODS[p] for p in pods]
    if victims is None:
        with pytest.raises(PreemptionError, match="no set of running pods found"):
            pods_to_preempt(PODS[preemptor], given_pods, reqs(*need))
        return
    got = pods_to_preempt(PODS[preemptor], given_pods, reqs(*need))
    assert sorted(p["metadata"]["name"] for p in got) == sorted(victims)


@pytest.mark.parametrize(
    ("need", "pod", "expected"),
    [((0, 0, 0), "burstable", 0), ((100, 100, 1), "bestEffort", 2),
     ((100, 100, 1), "burstable", 0), ((50, 50, 0), "burstable", 0)],
)  # fmt: skip
def test_distance(need: tuple[int, int, int], pod: str, expected: float) -> None:
    assert distance(reqs(*need), PODS[pod]) == expected


@pytest.mark.parametrize(
    ("need", "pod", "left"),
    [((0, 0, 0), "burstable", (0, 0, 0)), ((100, 100, 1), "bestEffort", (100, 100, 0)),
     ((100, 100, 1), "burstable", (0, 0, 0)), ((50, 50, 0), "burstable", (0, 0, 0)),
     ((200, 200, 1), "burstable", (100, 100, 0))],
)  # fmt: skip
def test_subtract(need: tuple[int, int, int], pod: str, left: tuple[int, int, int]) -> None:
    assert subtract(reqs(*need), [PODS[pod]]) == reqs(*left)


def test_equal_pods_are_taken_only_as_many_as_needed() -> None:
    """upstream's benchmark input: 110 tiny Burstable pods."""
    many = [mkpod(f"tiny{i}", 1, 1) for i in range(110)]
    assert len(pods_to_preempt(PODS["cluster-critical"], many, reqs(50))) == 50
    assert len(pods_to_preempt(PODS["cluster-critical"], many, reqs(110, 3))) == 110
    # a preemptor that is neither critical nor of higher priority preempts nothing
    with pytest.raises(PreemptionError):
        pods_to_preempt(PODS["bestEffort"], many, reqs(1))


pod_st = st.builds(
    lambda i, cpu, mem, guaranteed, prio: mkpod(
        f"p{i}", cpu, mem, limits=guaranteed and cpu > 0 and mem > 0, priority=prio
    ),
    st.integers(0, 10**6), st.integers(0, 800), st.integers(0, 800), st.booleans(),
    st.sampled_from([None, 0, 1000, CRITICAL]),
)  # fmt: skip


@given(
    st.lists(pod_st, max_size=8, unique_by=lambda p: p["metadata"]["name"]),
    st.integers(0, 1500), st.integers(0, 1500), st.integers(0, 3),
)  # fmt: skip
def test_the_choice_frees_enough_from_the_least_disruptive_classes(
    pods: list[dict], cpu: int, mem: int, n: int
) -> None:
    critical = PODS["cluster-critical"]
    need = reqs(cpu, mem, n)
    movable = [p for p in pods if (p["spec"].get("priority") or 0) < CRITICAL]
    try:
        victims = pods_to_preempt(critical, pods, need)
    except PreemptionError:
        assert subtract(need, movable) != []  # refused only when even all would not do
        return
    assert subtract(need, victims) == []
    assert all(v in movable for v in victims)
    assert len({id(v) for v in victims}) == len(victims)
    lower = [p for p in movable if qos_class(p) != "Guaranteed"]
    if subtract(need, lower) == []:  # enough without Guaranteed pods: none goes
        assert all(qos_class(v) != "Guaranteed" for v in victims)
    if not need:
        assert victims == []


# ------------------------------------------------------------------ handler
class Killer:
    def __init__(self) -> None:
        self.killed: list[tuple[str, str, str, PodCondition]] = []

    def __call__(self, pod: dict, reason: str, message: str, condition: PodCondition) -> None:
        self.killed.append((pod["metadata"]["name"], reason, message, condition))


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, ref: Any, etype: str, reason: str, message: str) -> None:
        self.events.append((ref["name"], etype, reason, message))


def no_hold(pod: dict, victims: list[dict]) -> None:
    raise AssertionError("nothing preempted, nothing to wait for")


def static(p: dict) -> dict:
    p["metadata"]["annotations"]["kubernetes.io/config.source"] = "file"
    return p


def test_the_handler_kills_the_chosen_pods_with_upstreams_status_and_counts_them() -> None:
    running = [mkpod("be"), mkpod("small", 100, 100), mkpod("big", 600, 600)]
    killer, events = Killer(), Events()
    held: list[tuple[str, list[str]]] = []
    handler = CriticalPodAdmissionHandler(
        lambda: running, killer,
        lambda p, vs: held.append((p["metadata"]["name"], [v["metadata"]["name"] for v in vs])),
        events,
    )  # fmt: skip
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=1000 * MI)
    node: Node = {"metadata": {"name": "n"}}
    for p in running:
        assert a.admit(p["metadata"]["uid"], p, node) is None
    crit = static(mkpod("crit", 500, 100))
    reasons = a.failures(crit, node)
    assert [r.reason for r in reasons] == ["OutOfcpu"]
    assert isinstance(reasons[0], InsufficientResource)
    before = metrics.PREEMPTIONS.labels("cpu")._value.get()
    assert handler.handle_admission_failure(crit, reasons) == []
    condition: PodCondition = {
        "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
        "message": "Pod was preempted by Kubelet to accommodate a critical pod.",
    }  # fmt: skip
    msg = "Preempted in order to admit critical pod"
    assert killer.killed == [("big", "Preempting", msg, condition)]
    assert events.events == [("big", "Warning", "Preempting", msg)]
    assert metrics.PREEMPTIONS.labels("cpu")._value.get() == before + 1
    assert held == [("crit", ["big"])]  # crit starts once big has stopped


def test_the_handler_leaves_other_pods_and_other_reasons_alone() -> None:
    running = [mkpod("be")]
    killer = Killer()
    handler = CriticalPodAdmissionHandler(lambda: running, killer, no_hold, None)
    short = InsufficientResource("OutOfpods", "m", "pods", 1, 1, 1)
    ports = Rejection("NodePorts", "m")
    # not critical: every reason stands
    assert handler.handle_admission_failure(mkpod("x"), [short]) == [short]
    # critical, but a reason preemption cannot help: only that one is returned
    assert handler.handle_admission_failure(static(mkpod("c")), [short, ports]) == [ports]
    assert killer.killed == []
    # critical, nothing to free it with: an error (UnexpectedAdmissionError upstream)
    with pytest.raises(PreemptionError, match="error finding a set of pods to preempt"):
        CriticalPodAdmissionHandler(lambda: [], killer, no_hold, None).handle_admission_failure(
            static(mkpod("c")), [short]
        )
    # the pod itself, seen among the active pods, is never its own victim
    me = static(mkpod("me"))
    with pytest.raises(PreemptionError):
        CriticalPodAdmissionHandler(lambda: [me], killer, no_hold, None).handle_admission_failure(
            me, [short]
        )
    assert killer.killed == []
