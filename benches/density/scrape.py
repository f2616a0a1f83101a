"""Stats at density (issue 36): what a kubelet costs when idle, and what
metrics-server's scrapes of /stats/summary and /metrics/resource cost it.

- idle(pid, secs): the kubelet's CPU (cores) and RSS with no pod on the node.
- scrape_cost(port, pid, scrapes): each endpoint fetched `scrapes` times back
  to back on the read-only port. The kubelet's CPU over the burst, less what
  it spends anyway (its rate over a quiet window of the same length just
  before), divided by the scrapes, is the cost of one scrape; at
  metrics-server's 15 s period that is `cores_at_period`.

CPU comes from /proc (clock ticks of 10 ms): a burst lasts long enough
(hundreds of ms at 1,000 pods) for the ticks not to matter, and the quiet
window is as long as the burst so background work (relist, status, leases)
cancels out on average; single runs are still noisy at 1 % of a core.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

import aiohttp

from benches.procmetrics import pct, proc_cpu_s, proc_rss_mib

PERIOD_S = 15.0  # metrics-server's default --metric-resolution
ENDPOINTS = ("/stats/summary", "/metrics/resource")
MIN_QUIET_S = 5.0


@dataclass(frozen=True)
class EndpointCost:
    path: str
    scrapes: int
    bytes: int  # of the last answer
    wall_ms_p50: float
    cpu_ms_per_scrape: float  # the kubelet's CPU per scrape, background rate removed
    cores_at_period: float  # that, once every PERIOD_S


async def idle(pid: int, secs: float) -> tuple[float, float]:
    """(CPU cores, RSS MiB) of the kubelet over `secs` with nothing to do."""
    c0, t0 = proc_cpu_s(pid), time.monotonic()
    await asyncio.sleep(secs)
    return (proc_cpu_s(pid) - c0) / (time.monotonic() - t0), proc_rss_mib(pid)


async def _burst(
    http: aiohttp.ClientSession, url: str, scrapes: int
) -> tuple[list[float], int, float]:
    """(wall time of each scrape, bytes of the last, wall time of all)."""
    walls: list[float] = []
    size = 0
    t0 = time.monotonic()
    for _ in range(scrapes):
        s = time.monotonic()
        async with http.get(url) as resp:
            resp.raise_for_status()
            size = len(await resp.read())
        walls.append(time.monotonic() - s)
    return walls, size, time.monotonic() - t0


async def endpoint_cost(
    http: aiohttp.ClientSession, port: int, pid: int, path: str, scrapes: int
) -> EndpointCost:
    url = f"http://127.0.0.1:{port}{path}"
    await _burst(http, url, 1)  # warm: a first answer may build caches
    # A trial burst says how long the quiet window must be.
    _, _, trial = await _burst(http, url, scrapes)
    quiet = max(MIN_QUIET_S, trial)
    q0, qt0 = proc_cpu_s(pid), time.monotonic()
    await asyncio.sleep(quiet)
    background = (proc_cpu_s(pid) - q0) / (time.monotonic() - qt0)
    c0 = proc_cpu_s(pid)
    walls, size, wall = await _burst(http, url, scrapes)
    spent = proc_cpu_s(pid) - c0 - background * wall
    per = max(0.0, spent) / scrapes
    return EndpointCost(
        path=path,
        scrapes=scrapes,
        bytes=size,
        wall_ms_p50=round((pct(walls, 0.5) or 0.0) * 1000, 2),
        cpu_ms_per_scrape=round(per * 1000, 3),
        cores_at_period=round(per / PERIOD_S, 5),
    )


async def scrape_cost(port: int, pid: int, scrapes: int) -> dict[str, object]:
    """Each of ENDPOINTS measured in turn, and their sum at PERIOD_S."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        costs = [await endpoint_cost(http, port, pid, p, scrapes) for p in ENDPOINTS]
    return {
        "period_s": PERIOD_S,
        "endpoints": [asdict(c) for c in costs],
        "cores_at_period": round(sum(c.cores_at_period for c in costs), 5),
    }
