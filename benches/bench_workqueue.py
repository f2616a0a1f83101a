"""The pod work queue, native vs reference: enqueue+get pairs, and get-ready cost with many
keys not yet due."""

from __future__ import annotations

import pytest

from kubelet.util.workqueue import (
    NativeRateLimitingQueue,
    NativeWorkQueue,
    ReferenceRateLimitingQueue,
    ReferenceWorkQueue,
)

SIZES = [100, 1000, 10000]
IMPLS = {"native": NativeWorkQueue, "reference": ReferenceWorkQueue}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_workqueue(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """n enqueue+get pairs per round (time per round / n = cost per pair)."""
    benchmark.group = f"workqueue_{n}"
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["pairs"] = n
    now = [0.0]
    q = IMPLS[impl](lambda: now[0])
    keys = [f"pod-{i}" for i in range(n)]

    def one() -> None:
        for k in keys:
            q.enqueue(k, 0.0)
        now[0] += 1.0
        got = q.get_work()
        assert len(got) == n

    benchmark(one)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_workqueue_get_ready_with_idle_keys(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """get_work with n keys due in the future and 10 due now: should not grow with n."""
    benchmark.group = f"workqueue_idle_{n}"
    benchmark.extra_info["impl"] = impl
    now = [0.0]
    q = IMPLS[impl](lambda: now[0])
    for i in range(n):
        q.enqueue(f"idle-{i}", 1e9)

    def one() -> None:
        for j in range(10):
            q.enqueue(f"due-{j}", 0.0)
        now[0] += 1.0
        assert len(q.get_work()) == 10

    benchmark(one)


RL_IMPLS = {"native": NativeRateLimitingQueue, "reference": ReferenceRateLimitingQueue}


@pytest.mark.parametrize("impl", list(RL_IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_ratelimiting_queue(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """client-go style queue: n add + get + done cycles per round, plus n rate-limited
    re-adds that come due and are taken again."""
    benchmark.group = f"ratelimiting_queue_{n}"
    benchmark.extra_info["impl"] = impl
    now = [0.0]
    q = RL_IMPLS[impl](lambda: now[0], base=0.005, cap=1.0)
    keys = [f"pod-{i}" for i in range(n)]

    def one() -> None:
        for k in keys:
            q.add(k)
        for _ in keys:
            k = q.get_nowait()
            q.add_rate_limited(k)
            q.done(k)
        now[0] += 2.0
        for _ in keys:
            k = q.get_nowait()
            q.forget(k)
            q.done(k)
        assert len(q) == 0

    benchmark(one)
