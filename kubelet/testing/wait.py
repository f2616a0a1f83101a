"""Waiting for a condition in tests and benchmarks: one loop, a sync and an
async form, the same timeout message.

`fn` is polled every `every` seconds until it returns something truthy, which
is returned. An exception of a type in `retry_on` counts as "not yet" (a node
not registered yet, a status field not there yet); any other propagates at
once, so a part that died fails the wait without sitting out the timeout. At
the deadline the wait fails with WaitTimeout naming `what` and the last value
or error seen (and what `detail` says).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

T = TypeVar("T")

# What a poll of a part that is still coming up raises (a refused connection, a
# kubectl that failed, a field not there yet) is retried by default.
RETRY_ALL: tuple[type[BaseException], ...] = (Exception,)


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline."""


def _timed_out(
    what: str, timeout: float, last: object, detail: Callable[[], str] | None
) -> WaitTimeout:
    msg = f"timed out after {timeout:g}s waiting for {what}; last: {last!r}"
    return WaitTimeout(f"{msg}\n{detail()}" if detail is not None else msg)


def wait_for(
    what: str,
    fn: Callable[[], T],
    timeout: float = 60.0,
    every: float = 0.5,
    retry_on: tuple[type[BaseException], ...] = RETRY_ALL,
    detail: Callable[[], str] | None = None,
) -> T:
    """fn()'s first truthy result, polled every `every` s for `timeout` s; a
    timeout's message ends with detail() (a log's tail, say)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = got = fn()
            if got:
                return got
        except retry_on as err:  # not yet: kept for the timeout message
            last = err
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last, detail)
        time.sleep(every)


async def wait_for_async(
    what: str,
    fn: Callable[[], T | Awaitable[T]],
    timeout: float = 30.0,
    every: float = 0.1,
    retry_on: tuple[type[BaseException], ...] = RETRY_ALL,
    detail: Callable[[], str] | None = None,
) -> T:
    """wait_for on the event loop: `fn` may be a plain or an async function."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            got: object = fn()
            if inspect.isawaitable(got):
                got = await got
            last = got
            if got:
                return cast(T, got)
        except retry_on as err:  # not yet: kept for the timeout message
            last = err
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last, detail)
        await asyncio.sleep(every)
