"""No Rust panic crosses into Python: fuzzed input to every native entry point.

A pyo3 panic surfaces as pyo3_runtime.PanicException, a BaseException that
`except Exception` in the kubelet's loops would not catch. Bad bytes and bad
numbers must come back as ValueError (or TypeError for a wrong type) and leave
the object usable.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import kubelet_native  # built by hack/lib.sh's ensure_env: a missing module is a failure
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CORPUS = Path(__file__).resolve().parents[3] / "rust" / "tests" / "corpus"
SAMPLES = [
    ((CORPUS / f"sandboxes-{i}.bin").read_bytes(), (CORPUS / f"containers-{i}.bin").read_bytes())
    for i in range(3)
]
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    b = bytearray(data)
    for kind, pos, val in edits:
        if kind == 0 and b:
            b[pos % len(b)] = val
        elif kind == 1:
            del b[pos % (len(b) + 1) :]
        else:
            i = pos % (len(b) + 1)
            b[i:i] = bytes([val]) * (1 + val % 7)
    return bytes(b)


edits = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 1 << 16), st.integers(0, 255)), max_size=4
)


@FUZZ
@given(
    step=st.integers(0, 2),
    s_edits=edits,
    c_edits=edits,
    junk=st.binary(max_size=256),
    use_junk=st.booleans(),
)
def test_relist_differ_bad_bytes_are_value_errors(
    step: int,
    s_edits: list[tuple[int, int, int]],
    c_edits: list[tuple[int, int, int]],
    junk: bytes,
    use_junk: bool,
) -> None:
    d = kubelet_native.RelistDiffer()
    s1, c1 = SAMPLES[1]
    d.diff(s1, c1)
    s, c = SAMPLES[step]
    s, c = _mutate(s, s_edits), (junk if use_junk else _mutate(c, c_edits))
    try:
        d.diff(s, c)
    except ValueError as err:
        assert "undecodable relist response" in str(err)
        # Left as it was: the last good input again is no change.
        assert d.diff(s1, c1) == ([], [])
    # Usable after whatever happened.
    d.diff(*SAMPLES[2])
    assert d.running_pods == 2


def test_relist_differ_wrong_types_are_type_errors() -> None:
    d = kubelet_native.RelistDiffer()
    for bad in ("text", None, 3, bytearray(b"")):
        with pytest.raises(TypeError):
            d.diff(bad, b"")


floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0]),
)


@FUZZ
@given(ops=st.lists(st.tuples(st.integers(0, 5), st.text(max_size=3), floats, floats), max_size=30))
def test_rate_limiting_queue_numbers(ops: list[tuple[int, str, float, float]]) -> None:
    q = kubelet_native.RateLimitingQueueCore()
    for op, key, a, b in ops:
        try:
            if op == 0:
                q.add_after(key, a, b)
            elif op == 1:
                q.add_rate_limited(key, a)
            elif op == 2:
                k = q.get_nowait(a)
                if k is not None:
                    q.done(k)
            elif op == 3:
                # A short real wait at most: the deadline is what is fuzzed.
                q.get(a, min(b, 0.001) if not math.isnan(b) else b)
            elif op == 4:
                q.add(key)
            else:
                q.forget(key)
        except ValueError as err:
            assert "NaN" in str(err)
            assert math.isnan(a) or math.isnan(b)
    q.shut_down()
    # An infinite timeout on a shut-down queue returns at once.
    while q.get_nowait(0.0) is not None:
        pass
    assert q.get(0.0, math.inf) is None


def test_rate_limiting_queue_infinite_waits_do_not_panic() -> None:
    q = kubelet_native.RateLimitingQueueCore()
    q.add_after("a", math.inf, 0.0)  # never due
    assert q.get(0.0, 0.01) is None
    with pytest.raises(ValueError, match="NaN"):
        q.get(0.0, math.nan)
    with pytest.raises(ValueError, match="NaN"):
        q.add_after("b", math.nan, 0.0)


@FUZZ
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.text(max_size=3), floats), max_size=30))
def test_work_queue_and_pod_cache_numbers(ops: list[tuple[int, str, float]]) -> None:
    wq = kubelet_native.WorkQueueCore()
    pc = kubelet_native.PodCacheCore()
    for op, key, t in ops:
        try:
            if op == 0:
                wq.enqueue_at(key, t)
                pc.set(key, None, None, t)
            elif op == 1:
                wq.get_work(t)
                pc.update_time(t)
            elif op == 2:
                pc.add_waiter(key, t)
                pc.fresh(key, t)
            else:
                wq.remove(key)
                pc.delete(key)
        except ValueError as err:
            assert "NaN" in str(err) and math.isnan(t)
    # Everything enqueued at a real time comes out by +inf.
    wq.get_work(math.inf)
    assert len(wq) == 0
