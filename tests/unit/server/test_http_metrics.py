"""kubelet_http_requests_* on the read-only and kubelet ports, labelled as
upstream's server labels them (refused requests count too)."""

from __future__ import annotations

from typing import Any

import aiohttp

from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.httpmetrics import HTTP_INFLIGHT, HTTP_REQUESTS, path_bucket


class View(s.NoPods):
    def get_pods(self) -> list[dict[str, Any]]:
        return []


def _value(labels: tuple[str, ...]) -> float:
    return HTTP_REQUESTS.labels(*labels)._value.get()


async def test_requests_are_counted_by_upstreams_buckets() -> None:
    ro = await s.serve(s.read_only_app(View, []), "127.0.0.1", 0)
    auth = ServerAuth(anonymous_enabled=False, authorization_mode="AlwaysAllow")
    rw = await s.serve(s.kubelet_app(View, dict, [], auth), "127.0.0.1", 0)
    ro_port, rw_port = int(ro.addresses[0][1]), int(rw.addresses[0][1])
    pods_ro = ("GET", "pods", "readonly", "false")
    other_ro = ("GET", "other", "readonly", "false")
    exec_rw = ("POST", "exec", "readwrite", "true")
    before = [_value(x) for x in (pods_ro, other_ro, exec_rw)]
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/pods", "/pods/", "/nope/x"):
                async with http.get(f"http://127.0.0.1:{ro_port}{path}") as r:
                    await r.read()
            # refused by authentication (401), still counted
            async with http.post(f"http://127.0.0.1:{rw_port}/exec/ns/p/c?command=ls") as r:
                assert r.status == 401
    finally:
        await ro.cleanup()
        await rw.cleanup()
    after = [_value(x) for x in (pods_ro, other_ro, exec_rw)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 1]
    assert HTTP_INFLIGHT.labels(*pods_ro)._value.get() == 0


def test_path_buckets() -> None:
    known = frozenset({"metrics", "metrics/cadvisor", "stats", "portForward"})
    assert path_bucket("/metrics/cadvisor", known) == "metrics/cadvisor"
    assert path_bucket("/metrics/slis", known) == "other"
    assert path_bucket("/metrics", known) == "metrics"
    assert path_bucket("/stats/summary", known) == "stats"
    assert path_bucket("/portForward/ns/p", known) == "portForward"
    assert path_bucket("/", known) == "other"
