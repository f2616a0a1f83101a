"""Eviction manager with injected signals: thresholds, conditions, ranking, admission."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubelet.eviction.signals import Observation
from kubelet.metrics import REGISTRY
from tests.unit.eviction.helpers import GiB, Harness, MiB, pod


async def test_hard_threshold_evicts_one_pod_per_pass_by_rank() -> None:
    h = Harness()  # default evictionHard memory.available: 100Mi
    h.pods = [
        pod("static", static=True),
        pod("cluster-critical", priority=2_000_000_000),
        pod("important", priority=1000),
        pod("within-request", mem_req="1Gi"),
        pod("over-request", mem_req="10Mi"),
        pod("besteffort"),
    ]
    h.usage = {"within-request": 500 * MiB, "over-request": 50 * MiB, "besteffort": 30 * MiB,
               "important": 10 * MiB, "cluster-critical": 1 * GiB}  # fmt: skip
    assert await h.m.synchronize() is None  # 4 GiB available: nothing to do
    assert not h.m.under("MemoryPressure")
    h.available = 50 * MiB
    await h.m.synchronize()
    # Over its request by the most (40 MiB more than "besteffort"'s 30 MiB).
    assert h.evictions[-1][:3] == ("over-request", 1, "Evicted")  # immediate: 1 s
    assert h.evictions[-1][3].startswith("The node was low on resource: memory.")
    assert h.m.under("MemoryPressure")
    await h.m.synchronize()
    await h.m.synchronize()
    await h.m.synchronize()
    order = [e[0] for e in h.evictions]
    # Then the other pod over its request, then by priority; static pods never.
    assert order == ["over-request", "besteffort", "important", "within-request"][: len(order)]
    assert "static" not in order and "cluster-critical" not in order


async def test_pressure_holds_for_the_transition_period_and_gates_besteffort() -> None:
    h = Harness(eviction_pressure_transition_period=300.0)
    h.available = 50 * MiB
    await h.m.synchronize()
    assert h.m.under("MemoryPressure")
    be, burst = pod("be"), pod("b", mem_req="1Mi")
    r = h.m.admit(be)
    assert r is not None and r.reason == "Evicted" and "MemoryPressure" in r.message
    assert h.m.admit(burst) is None
    tolerant = pod("tolerant")
    tolerant["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert h.m.admit(tolerant) is None  # it asked to run under memory pressure
    tolerant["spec"]["tolerations"][0]["effect"] = "NoExecute"
    assert h.m.admit(tolerant) is not None
    assert h.m.admit(pod("critical", priority=2_000_000_000)) is None
    h.available = 4 * GiB
    h.now += 60
    await h.m.synchronize()
    assert h.m.under("MemoryPressure")  # recovered, but within the transition period
    h.now += 300
    assert not h.m.under("MemoryPressure")
    assert h.m.admit(be) is None


async def test_soft_threshold_waits_for_its_grace_period() -> None:
    h = Harness(
        eviction_hard={},
        eviction_soft={"memory.available": "1Gi"},
        eviction_soft_grace_period={"memory.available": "30s"},
        eviction_max_pod_grace_period=7,
    )
    h.pods = [pod("a")]
    h.available = 512 * MiB
    await h.m.synchronize()
    assert h.evictions == [] and h.m.under("MemoryPressure")
    h.now += 31
    await h.m.synchronize()
    assert h.evictions[0][:2] == ("a", 7)  # soft: the configured max grace, not 0


async def test_an_emptydir_over_its_size_limit_evicts_its_pod_at_once() -> None:
    h = Harness()  # plenty of memory: only the volume's limit matters
    scratch = pod("scratch")
    scratch["spec"]["volumes"] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Mi"}},
        {"name": "cfg", "configMap": {"name": "c"}},
    ]
    unlimited = pod("unlimited")
    unlimited["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    h.pods = [scratch, unlimited]
    h.volumes = {"scratch": {"tmp": MiB, "cfg": 10 * MiB}, "unlimited": {"tmp": 50 * MiB}}
    assert await h.m.synchronize() is None  # exactly at the limit is fine
    h.volumes["scratch"]["tmp"] = MiB + 4096
    assert await h.m.synchronize() is scratch
    assert h.evictions == [
        ("scratch", 1, "Evicted", 'Usage of EmptyDir volume "tmp" exceeds the limit "1Mi". ')
    ]
    assert await h.m.synchronize() is None  # the other pod has no limit


async def test_an_evicted_pod_is_not_picked_twice_and_is_forgotten_once_gone() -> None:
    """The pod an eviction chose stays active while it terminates: later passes
    pick another one; once it is gone the manager keeps no record of it (a node
    that evicts for months must not grow)."""
    h = Harness()
    kept = [pod("a", mem_req="10Mi"), pod("b", mem_req="1Gi")]
    h.pods = list(kept)
    h.usage = {"a": 50 * MiB, "b": 10 * MiB}
    h.available = 50 * MiB

    async def evict_but_keep(p: dict, grace: int, reason: str, message: str, **_: Any) -> None:
        h.evictions.append((p["metadata"]["name"], grace, reason, message))

    h.m.evict = evict_but_keep  # the pods keep terminating for a while
    await h.m.synchronize()
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a", "b"]
    assert await h.m.synchronize() is None and h.m.evicted == {"a", "b"}
    h.pods = [kept[1]]
    await h.m.synchronize()
    assert h.m.evicted == {"b"}


async def test_a_pressure_eviction_adds_the_disruption_target_condition() -> None:
    h = Harness()
    h.pods = [pod("a", mem_req="10Mi")]
    h.usage = {"a": 50 * MiB}
    h.available = 50 * MiB
    conditions: list[Any] = []

    async def evict(p: dict, grace: int, reason: str, message: str, **kw: Any) -> None:
        conditions.append(kw.get("condition"))

    h.m.evict = evict
    await h.m.synchronize()
    assert len(conditions) == 1
    c = conditions[0]
    assert (c["type"], c["status"], c["reason"]) == (
        "DisruptionTarget", "True", "TerminationByKubelet"
    )  # fmt: skip
    assert c["message"].startswith("The node was low on resource: memory.")


async def test_an_eviction_observes_the_age_of_the_stats_it_was_decided_on() -> None:
    """kubelet_eviction_stats_age_seconds: from the signals' read to the eviction,
    by signal (the read here takes 3 s of the harness's clock)."""
    h = Harness()
    h.pods = [pod("besteffort")]
    h.usage = {"besteffort": 30 * MiB}
    h.available = 50 * MiB

    def slow_read() -> dict[str, Observation]:
        h.now += 3
        return {"memory.available": Observation(h.available, 8 * GiB)}

    h.m.sources = replace(h.m.sources, observe=slow_read)
    before = _age_sum("memory.available")
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["besteffort"]
    assert _age_sum("memory.available") - before == 3.0


def _age_sum(signal: str) -> float:
    value = REGISTRY.get_sample_value(
        "kubelet_eviction_stats_age_seconds_sum", {"eviction_signal": signal}
    )
    return value or 0.0
