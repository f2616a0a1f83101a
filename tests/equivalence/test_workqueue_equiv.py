"""Native work queue == reference: a stateful model over random operation sequences."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.util.workqueue import (  # noqa: E402
    NativeRateLimitingQueue,
    NativeWorkQueue,
    ReferenceRateLimitingQueue,
    ReferenceWorkQueue,
)

KEYS = st.sampled_from([f"k{i}" for i in range(8)])


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        clock = lambda: self.now  # noqa: E731
        self.ref = ReferenceWorkQueue(clock)
        self.nat = NativeWorkQueue(clock)

    @rule(key=KEYS, delay=st.floats(min_value=0, max_value=10, allow_nan=False))
    def enqueue(self, key: str, delay: float) -> None:
        self.ref.enqueue(key, delay)
        self.nat.enqueue(key, delay)

    @rule(step=st.floats(min_value=0, max_value=5, allow_nan=False))
    def advance(self, step: float) -> None:
        self.now += step

    @rule()
    def get_work(self) -> None:
        assert self.nat.get_work() == self.ref.get_work()

    @rule(key=KEYS)
    def remove(self, key: str) -> None:
        self.ref.remove(key)
        self.nat.remove(key)

    @invariant()
    def same_size(self) -> None:
        assert len(self.nat) == len(self.ref)


QueueMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestWorkQueue = QueueMachine.TestCase


class RateLimitingMachine(RuleBasedStateMachine):
    """client-go style queue: add / add_after / add_rate_limited / get / done / forget /
    shut_down in random order, with a shared fake clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        clock = lambda: self.now  # noqa: E731
        self.ref = ReferenceRateLimitingQueue(clock, base=0.5, cap=8.0)
        self.nat = NativeRateLimitingQueue(clock, base=0.5, cap=8.0)

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.ref.add(key)
        self.nat.add(key)

    # Whole seconds so that ties in ready time (and their order) are common.
    @rule(key=KEYS, delay=st.integers(min_value=-1, max_value=10).map(float))
    def add_after(self, key: str, delay: float) -> None:
        self.ref.add_after(key, delay)
        self.nat.add_after(key, delay)

    @rule(key=KEYS)
    def add_rate_limited(self, key: str) -> None:
        self.ref.add_rate_limited(key)
        self.nat.add_rate_limited(key)

    @rule(key=KEYS)
    def forget(self, key: str) -> None:
        self.ref.forget(key)
        self.nat.forget(key)

    @rule(step=st.integers(min_value=0, max_value=3).map(float))
    def advance(self, step: float) -> None:
        self.now += step

    @rule()
    def get(self) -> None:
        assert self.nat.get_nowait() == self.ref.get_nowait()

    @rule(key=KEYS)
    def done(self, key: str) -> None:
        self.ref.done(key)
        self.nat.done(key)

    @rule()
    def shut_down(self) -> None:
        self.ref.shut_down()
        self.nat.shut_down()

    @invariant()
    def same_state(self) -> None:
        assert len(self.nat) == len(self.ref)
        assert self.nat.waiting_len() == self.ref.waiting_len()
        assert self.nat.processing_len() == self.ref.processing_len()
        assert self.nat.next_ready() == self.ref.next_ready()
        assert self.nat.shutting_down == self.ref.shutting_down
        for k in (f"k{i}" for i in range(8)):
            assert self.nat.num_requeues(k) == self.ref.num_requeues(k)


RateLimitingMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None
)
TestRateLimitingQueue = RateLimitingMachine.TestCase
