"""kubelet_asyncio_tasks counts the tasks alive on the loop that serves /metrics."""

from __future__ import annotations

import asyncio
import re

from prometheus_client import generate_latest

from kubelet.metrics import REGISTRY


def _tasks(text: str) -> int | None:
    m = re.search(r"^kubelet_asyncio_tasks ([0-9.]+)$", text, re.M)
    return None if m is None else int(float(m.group(1)))


async def _scrape_with(extra: int) -> int | None:
    stop = asyncio.Event()
    held = [asyncio.create_task(stop.wait()) for _ in range(extra)]
    await asyncio.sleep(0)
    try:
        return _tasks(generate_latest(REGISTRY).decode())
    finally:
        stop.set()
        await asyncio.gather(*held)


def test_gauge_follows_the_loops_tasks() -> None:
    base = asyncio.run(_scrape_with(0))
    assert base is not None and base >= 1  # the scraping task itself
    assert asyncio.run(_scrape_with(7)) == base + 7


def test_no_loop_no_sample() -> None:
    assert _tasks(generate_latest(REGISTRY).decode()) is None
