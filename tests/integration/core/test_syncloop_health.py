"""/healthz/syncloop on a real Kubelet (simulated runtime): it fails once the sync
loop has not come round for longer than its threshold (here: housekeeping hung,
the clock read 301 s later) while the healthz port itself keeps answering, and
passes again as soon as the loop moves."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from kubelet.server import server as s


async def test_syncloop_check_fails_while_the_loop_is_stuck(node: Any, monkeypatch: Any) -> None:
    k = node.kubelet
    runner = await s.serve(s.healthz_app(lambda: k.host), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/healthz/syncloop"
    stuck, release = asyncio.Event(), asyncio.Event()
    real = k.housekeeping

    async def hung_housekeeping() -> None:
        stuck.set()
        await release.wait()
        await real()

    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url) as r:
                assert r.status == 200
            monkeypatch.setattr(k, "housekeeping", hung_housekeeping)
            await asyncio.wait_for(stuck.wait(), 10)
            async with http.get(url) as r:
                assert r.status == 200  # stuck, but not for long yet
            # On the clock the loop and the check share: just under five minutes
            # (upstream's floor; the sync frequency here is 10 s) passes ...
            monkeypatch.setattr(k.clock, "monotonic", lambda: time.monotonic() + 298.0)
            async with http.get(url) as r:
                assert r.status == 200
            # ... and past it fails.
            monkeypatch.setattr(k.clock, "monotonic", lambda: time.monotonic() + 301.0)
            async with http.get(url) as r:
                assert r.status == 500 and "syncloop failed" in await r.text()
            monkeypatch.setattr(k, "housekeeping", real)
            release.set()
            for _ in range(50):  # the loop comes round within a sync tick
                async with http.get(url) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.1)
            assert r.status == 200
    finally:
        release.set()
        await runner.cleanup()
