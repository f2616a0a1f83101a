"""client-go style rate-limited queue, on the implementation KUBELET_IMPL selects."""

from __future__ import annotations

import threading
import time

from kubelet.util.workqueue import RateLimitingQueue


def _q(base: float = 1.0, cap: float = 8.0):  # type: ignore[no-untyped-def]
    now = [0.0]
    return RateLimitingQueue(lambda: now[0], base=base, cap=cap), now


def test_a_key_is_queued_once_and_never_handed_out_twice() -> None:
    q, _ = _q()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get_nowait() == "a"
    q.add("a")  # while "a" is processed: kept dirty, not queued
    assert q.get_nowait() == "b"
    assert q.get_nowait() is None
    q.done("a")  # re-added while processing: back in the queue now
    assert q.get_nowait() == "a"
    q.done("a")
    q.done("b")
    assert q.get_nowait() is None
    assert q.processing_len() == 0


def test_add_after_only_moves_earlier_and_ties_keep_insertion_order() -> None:
    q, now = _q()
    q.add_after("a", 5)
    q.add_after("b", 5)
    q.add_after("a", 5)  # same time: must not move "a" behind "b"
    q.add_after("b", 9)  # later: ignored
    assert q.next_ready() == 5
    now[0] = 4.9
    assert q.get_nowait() is None
    now[0] = 5
    assert [q.get_nowait(), q.get_nowait(), q.get_nowait()] == ["a", "b", None]
    q.add_after("c", 0)  # no delay: queued at once
    assert q.get_nowait() == "c"


def test_rate_limited_backoff_doubles_to_the_cap_and_forget_resets() -> None:
    q, now = _q(base=1.0, cap=8.0)
    delays = [q.when("a") for _ in range(6)]
    assert delays == [1, 2, 4, 8, 8, 8]
    assert q.num_requeues("a") == 6
    q.forget("a")
    assert q.num_requeues("a") == 0
    q.add_rate_limited("a")  # 1 s
    now[0] = 0.99
    assert q.get_nowait() is None
    now[0] = 1.0
    assert q.get_nowait() == "a"


def test_shutdown_stops_adds_drains_queued_and_drops_delayed() -> None:
    q, now = _q()
    q.add("a")
    q.add_after("b", 1)
    q.shut_down()
    q.add("c")
    now[0] = 5
    assert q.shutting_down
    assert q.get_nowait() == "a"
    assert q.get_nowait() is None
    assert q.get(timeout=5) is None  # returns at once: shut down and drained


def test_blocking_get_wakes_on_add_from_another_thread() -> None:
    q = RateLimitingQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    t.start()
    time.sleep(0.05)
    assert t.is_alive()  # nothing queued yet: waiting, without holding the GIL
    q.add("x")
    t.join(5)
    assert got == ["x"]


def test_blocking_get_waits_for_a_delayed_key_and_times_out() -> None:
    q = RateLimitingQueue()
    assert q.get(timeout=0.05) is None
    q.add_after("later", 0.1)
    t0 = time.monotonic()
    assert q.get(timeout=5) == "later"
    assert time.monotonic() - t0 >= 0.09


def test_shutdown_releases_a_blocked_getter() -> None:
    q = RateLimitingQueue()
    got: list[str | None] = ["unset"]
    t = threading.Thread(target=lambda: got.__setitem__(0, q.get()))
    t.start()
    time.sleep(0.05)
    q.shut_down()
    t.join(5)
    assert not t.is_alive() and got == [None]


def test_pod_work_queue_takes_concurrent_enqueues_from_threads() -> None:
    from kubelet.util.workqueue import WorkQueue

    q = WorkQueue()
    got: list[str] = []

    def producer(t: int) -> None:
        for i in range(2000):
            q.enqueue(f"{t}-{i}", 0.0)

    def consumer() -> None:
        for _ in range(200):
            got.extend(q.get_work())

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
    threads.append(threading.Thread(target=consumer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got.extend(q.get_work(time.monotonic() + 1))
    assert sorted(got) == sorted(f"{t}-{i}" for t in range(4) for i in range(2000))
    assert len(q) == 0
