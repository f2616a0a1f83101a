"""Native pod cache == reference: random sequences of set / delete / update_time and
workers waiting with get_newer_than; after every step the same waiters must have
woken with the same (status, error)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.container.cache import NativeCache, ReferenceCache  # noqa: E402

UIDS = st.sampled_from(["a", "b", "c", "d"])
TIMES = st.integers(min_value=0, max_value=20).map(float)
ERR = RuntimeError("relist failed")

OPS = st.one_of(
    st.tuples(st.just("wait"), UIDS, TIMES),
    st.tuples(st.just("set"), UIDS, TIMES, st.integers(0, 5), st.booleans()),
    st.tuples(st.just("delete"), UIDS),
    st.tuples(st.just("time"), TIMES),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("get"), UIDS),
)


async def _run(cache_cls: type, ops: list[tuple]) -> list:  # type: ignore[type-arg]
    cache = cache_cls()
    tasks: list[asyncio.Task] = []  # type: ignore[type-arg]
    trace: list = []  # type: ignore[type-arg]

    def show(v: object) -> object:
        # Empty statuses are fresh objects each time: compare their content.
        return repr(v) if not isinstance(v, (int, str, tuple)) else v

    for op in ops:
        kind = op[0]
        if kind == "wait":
            tasks.append(asyncio.ensure_future(cache.get_newer_than(op[1], op[2])))
        elif kind == "set":
            _, uid, t, val, failed = op
            cache.set(uid, ("status", uid, val), ERR if failed else None, t)
        elif kind == "delete":
            cache.delete(op[1])
        elif kind == "time":
            cache.update_time(op[1])
        elif kind == "cancel" and op[1] < len(tasks):
            tasks[op[1]].cancel()
        elif kind == "get":
            trace.append(("get", tuple(show(x) for x in cache.get(op[1]))))
        for _ in range(3):
            await asyncio.sleep(0)
        trace.append(
            [
                "cancelled"
                if t.cancelled()
                else tuple(show(x) for x in t.result())
                if t.done()
                else "waiting"
                for t in tasks
            ]
        )
        trace.append(cache.waiting())
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    trace.append(cache.waiting())
    return trace


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=40))
def test_cache_native_equals_reference(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    ref = asyncio.run(_run(ReferenceCache, ops))
    nat = asyncio.run(_run(NativeCache, ops))
    assert nat == ref
    assert nat[-1] == 0  # nothing leaks once every waiter is gone
