"""Native work queue == reference: a stateful model over random operation sequences."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.util.workqueue import NativeWorkQueue, ReferenceWorkQueue  # noqa: E402

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
