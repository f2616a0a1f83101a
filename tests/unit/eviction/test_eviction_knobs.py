"""evictionMinimumReclaim, evictionPressureTransitionPeriod, evictionMaxPodGracePeriod
and evictionSoft with its grace periods, as upstream's eviction manager applies them."""

from __future__ import annotations

from tests.unit.eviction.test_eviction_manager import GiB, Harness, MiB, pod


async def test_minimum_reclaim_keeps_evicting_until_value_plus_reclaim_is_free() -> None:
    h = Harness(
        eviction_hard={"memory.available": "100Mi"},
        eviction_minimum_reclaim={"memory.available": "500Mi"},
    )
    h.pods = [pod(n, mem_req="1Mi") for n in "abcd"]
    h.usage = {"a": 40 * MiB, "b": 30 * MiB, "c": 20 * MiB, "d": 10 * MiB}
    h.available = 50 * MiB
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a"]
    # Past the threshold (100Mi) but short of 100Mi + 500Mi: still reclaiming.
    h.available = 300 * MiB
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a", "b"]
    assert h.m.under("MemoryPressure")
    h.available = 601 * MiB  # the minimum reclaim is met: no more evictions
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a", "b"]
    # Not acting any more: 300Mi is above the bare threshold again.
    h.available = 300 * MiB
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a", "b"]


async def test_without_minimum_reclaim_evictions_stop_at_the_threshold() -> None:
    h = Harness(eviction_hard={"memory.available": "100Mi"})
    h.pods = [pod(n, mem_req="1Mi") for n in "ab"]
    h.usage = {"a": 40 * MiB, "b": 30 * MiB}
    h.available = 50 * MiB
    await h.m.synchronize()
    h.available = 300 * MiB
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["a"]


async def test_transition_period_is_taken_as_configured() -> None:
    h = Harness(eviction_pressure_transition_period=4.0)
    h.available = 50 * MiB
    await h.m.synchronize()
    h.available = 4 * GiB
    h.now += 3
    await h.m.synchronize()
    assert h.m.under("MemoryPressure")  # observed 3 s ago, period 4 s
    h.now += 1.5
    assert not h.m.under("MemoryPressure")


async def test_soft_eviction_grace_is_the_lower_of_max_and_the_pods_own() -> None:
    h = Harness(
        eviction_hard={},
        eviction_soft={"memory.available": "1Gi"},
        eviction_soft_grace_period={"memory.available": "10s"},
        eviction_max_pod_grace_period=60,
    )
    short, plain = pod("short", mem_req="1Mi"), pod("plain", mem_req="1Mi")
    short["spec"]["terminationGracePeriodSeconds"] = 15
    h.pods = [short, plain]
    h.usage = {"short": 40 * MiB, "plain": 30 * MiB}
    h.available = 512 * MiB
    await h.m.synchronize()
    assert h.evictions == []  # soft: waits its grace period
    h.now += 11
    await h.m.synchronize()
    await h.m.synchronize()
    assert [e[:2] for e in h.evictions] == [("short", 15), ("plain", 60)]


def test_minimum_reclaim_is_validated_as_upstream() -> None:
    from kubelet.apis.config import KubeletConfiguration
    from kubelet.apis.config.validation import validate_kubelet_configuration

    c = KubeletConfiguration()
    c.eviction_minimum_reclaim = {"memory.available": "500Mi", "nodefs.available": "5%"}
    assert validate_kubelet_configuration(c) == []
    c.eviction_minimum_reclaim = {
        "memory.available": "-1Mi", "nodefs.available": "0%", "bogus": "1Mi",
        "imagefs.available": "lots",
    }  # fmt: skip
    errs = "\n".join(validate_kubelet_configuration(c))
    assert "evictionMinimumReclaim[memory.available] ('-1Mi')" in errs
    assert "evictionMinimumReclaim[nodefs.available] ('0%'): eviction percentage" in errs
    assert "evictionMinimumReclaim[bogus] ('1Mi'): unsupported eviction signal" in errs
    assert "evictionMinimumReclaim[imagefs.available] ('lots')" in errs
