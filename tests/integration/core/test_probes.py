"""Readiness, liveness and startup probes on the simulated runtime (exec through CRI
ExecSync; HTTP and TCP against a real local server)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubelet.testing.kubelets import sleeper


def exec_probe(cmd: str, **kw: Any) -> dict[str, Any]:
    return {"exec": {"command": ["sh", "-c", cmd]}, "periodSeconds": 1, **kw}


async def test_readiness_decides_ready_and_the_pod_condition(node) -> None:  # type: ignore[no-untyped-def]
    node.write(
        "rdy",
        [
            sleeper("good", readinessProbe=exec_probe("exit 0")),
            sleeper("bad", readinessProbe=exec_probe("exit 1")),
            sleeper("plain"),
        ],
    )
    await node.wait(lambda: node.container("rdy", "good")["ready"], timeout=20, what="good ready")
    assert node.phase("rdy") == "Running"
    assert node.container("rdy", "plain")["ready"] is True
    assert node.container("rdy", "bad")["ready"] is False
    conds = {x["type"]: x for x in node.pod("rdy")["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False"
    assert "bad" in conds["Ready"]["message"]


async def test_failing_liveness_probe_restarts_the_container(node) -> None:  # type: ignore[no-untyped-def]
    rec = node.record_events()
    node.write("live", [sleeper("app", livenessProbe=exec_probe("exit 1", failureThreshold=2))])
    await node.wait(
        lambda: node.container("live", "app")["restartCount"] >= 1, timeout=30, what="a restart"
    )
    reasons = [(r, m) for n, _t, r, m in rec.events if n.startswith("live")]
    assert ("Unhealthy", "Liveness probe failed: command exited with 1") in reasons
    assert any(
        r == "Killing" and "failed liveness probe, will be restarted" in m for r, m in reasons
    )


async def test_startup_probe_gates_liveness_and_readiness(node) -> None:  # type: ignore[no-untyped-def]
    node.write(
        "slow",
        [
            sleeper(
                "app",
                startupProbe=exec_probe("exit 1", failureThreshold=100),
                livenessProbe=exec_probe("exit 1", failureThreshold=1),
                readinessProbe=exec_probe("exit 0"),
            )
        ],
    )
    await node.wait(lambda: node.phase("slow") == "Running", timeout=20, what="Running")
    import asyncio

    await asyncio.sleep(4)
    st = node.container("slow", "app")
    # The startup probe never succeeds: liveness (which would fail at once) and
    # readiness (which would pass) do not run.
    assert st["restartCount"] == 0 and st["started"] is False and st["ready"] is False


async def test_http_and_tcp_probes(node, unused_tcp_port_factory) -> None:  # type: ignore[no-untyped-def]
    ok_port, bad_port, closed = (unused_tcp_port_factory() for _ in range(3))
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.headers.get("X-Probe", ""))
        return web.Response(status=200 if request.path == "/healthz" else 500)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", ok_port).start()
    await web.TCPSite(runner, "127.0.0.1", bad_port).start()
    try:
        http = {"host": "127.0.0.1", "path": "/healthz", "port": ok_port,
                "httpHeaders": [{"name": "X-Probe", "value": "yes"}]}  # fmt: skip
        node.write(
            "net",
            [
                sleeper("http-ok", readinessProbe={"httpGet": http, "periodSeconds": 1}),
                sleeper(
                    "http-500",
                    readinessProbe={
                        "httpGet": dict(http, port=bad_port, path="/x"),
                        "periodSeconds": 1,
                    },
                ),
                sleeper(
                    "tcp-ok",
                    readinessProbe={
                        "tcpSocket": {"host": "127.0.0.1", "port": ok_port},
                        "periodSeconds": 1,
                    },
                ),
                sleeper(
                    "tcp-closed",
                    readinessProbe={
                        "tcpSocket": {"host": "127.0.0.1", "port": closed},
                        "periodSeconds": 1,
                    },
                ),
            ],
        )
        await node.wait(
            lambda: (
                node.container("net", "http-ok")["ready"]
                and node.container("net", "tcp-ok")["ready"]
            ),
            timeout=20,
            what="the HTTP and TCP probes to pass",
        )
        assert node.container("net", "http-500")["ready"] is False
        assert node.container("net", "tcp-closed")["ready"] is False
        assert "yes" in hits  # the probe's headers were sent
    finally:
        await runner.cleanup()
