"""The crash-loop back-off stays capped across gc(), as the e2e spec 'should cap
back-off at MaxContainerBackOff' checks: a container that runs 5s and exits is
restarted every 5 minutes, never sooner."""

from __future__ import annotations

from kubelet.kuberuntime.backoff import Backoff


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _crash_loop(b: Backoff, clock: _Clock, runs: int) -> list[float]:
    """Runs the container `runs` times (5s each), restarting it as soon as the
    back-off allows with housekeeping's gc() every second; returns the delays
    between each exit and the next start."""
    key = "p_ns_uid_c_hash"
    delays = []
    finished = clock.t
    b.next(key, finished)  # the first exit
    for _ in range(runs):
        while b.in_backoff_since(key, finished):
            clock.t += 1.0
            b.gc()
        delays.append(clock.t - finished)
        b.next(key, finished)
        clock.t += 5.0
        finished = clock.t
        b.gc()
    return delays


def test_capped_backoff_survives_gc() -> None:
    clock = _Clock()
    b = Backoff(10.0, 300.0, clock=clock)
    delays = _crash_loop(b, clock, 10)
    assert delays[:5] == [10.0, 20.0, 40.0, 80.0, 160.0]
    assert delays[5:] == [300.0] * 5


def test_backoff_forgotten_after_twice_the_cap_without_failure() -> None:
    clock = _Clock()
    b = Backoff(10.0, 300.0, clock=clock)
    b.next("k", clock.t)
    b.next("k", clock.t)
    assert b.get("k") == 20.0
    clock.t += 601.0
    b.gc()
    assert b.get("k") == 0.0
    b.next("k", clock.t)
    assert b.get("k") == 10.0
