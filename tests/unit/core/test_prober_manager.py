"""ProbeManager workers: exec probes on the CRI fake, HTTP/TCP probes on local servers.

Probe periods cannot go below 1 s, so the tests do not sleep: `Ticker` stands in
for the asyncio module inside prober_manager and parks every worker's sleep
until the test calls tick(), which runs exactly one probe per live worker.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService
from kubelet.prober import prober_manager as pm_mod
from kubelet.prober.prober import Prober, Result
from kubelet.prober.prober_manager import ProbeManager
from kubelet.testing.net import free_port, serving
from kubelet.util.clock import FakeClock

T0 = 1_700_000_000.0  # whole seconds: startedAt has second resolution


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Ticker:
    """The `asyncio` prober_manager sees: sleep() parks until tick()."""

    def __init__(self, live: Callable[[], int]) -> None:
        self._live = live
        self.parked: list[asyncio.Future[None]] = []
        self.slept: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        fut = asyncio.get_running_loop().create_future()
        self.parked.append(fut)
        await fut

    async def settle(self) -> None:
        """Until every live worker is parked (probes may do real I/O)."""
        for _ in range(2000):
            self.parked = [f for f in self.parked if not f.done()]
            if len(self.parked) >= self._live():
                return
            await asyncio.sleep(0.001)
        raise AssertionError(f"{self._live()} workers, only {len(self.parked)} parked")

    async def tick(self, n: int = 1) -> None:
        for _ in range(n):
            await self.settle()
            parked, self.parked = self.parked, []
            for f in parked:
                f.set_result(None)
            await self.settle()


class ExecRuntime(FakeRuntimeService):
    """The CRI fake, with the exit code of ExecSync set per container by the test."""

    def __init__(self) -> None:
        super().__init__()
        self.exit_code: dict[str, int] = {}

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> Any:
        resp = await super().exec_sync(container_id, cmd, timeout)
        resp.exit_code = self.exit_code.get(container_id, 0)
        if resp.exit_code:
            resp.stderr = f"{cmd[0]} broke".encode()
        return resp

    def execs(self, cid: str, cmd: str | None = None) -> int:
        return sum(
            1 for a in self.called("exec_sync") if a[0] == cid and (cmd is None or a[1] == [cmd])
        )


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], str, str, str]] = []

    def event(self, ref: dict[str, Any], etype: str, reason: str, message: str) -> None:
        self.events.append((ref, etype, reason, message))


class Node:
    """The kubelet around the manager: runtime, API statuses, on_change calls, clock."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rt = ExecRuntime()
        self.statuses: dict[str, dict[str, Any]] = {}
        self.changes: list[str] = []
        self.recorder = Recorder()
        self.clock = FakeClock(T0)
        self.pm = ProbeManager(
            Prober(self.rt),
            self.statuses.get,
            self.changes.append,
            self.recorder,
            clock=self.clock.time,
        )
        self.ticker = Ticker(lambda: len(self.pm))
        monkeypatch.setattr(pm_mod, "asyncio", self.ticker)

    async def container(self, uid: str) -> str:
        sid = await self.rt.run_pod_sandbox(
            pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name=uid, uid=uid))
        )
        cid = await self.rt.create_container(
            sid, pb.ContainerConfig(metadata=pb.ContainerMetadata(name="c")), pb.PodSandboxConfig()
        )
        await self.rt.start_container(cid)
        return cid

    def running(
        self, uid: str, cid: str, name: str = "c", started: float = T0, ip: str = "127.0.0.1"
    ) -> None:
        self.statuses[uid] = {
            "podIP": ip,
            "containerStatuses": [
                {
                    "name": name,
                    "containerID": f"containerd://{cid}",
                    "state": {"running": {"startedAt": rfc3339(started)}},
                }
            ],
        }

    async def pod(self, uid: str, **probes: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """A pod with one container "c" running in the fake, with these probes."""
        cid = await self.container(uid)
        self.running(uid, cid)
        p = {
            "metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "busybox", **probes}]},
        }
        return p, cid


def exec_probe(cmd: str, **kw: Any) -> dict[str, Any]:
    return {"exec": {"command": [cmd]}, "periodSeconds": 1, **kw}


@pytest.fixture
async def node(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    n = Node(monkeypatch)
    yield n
    await n.pm.stop()


# ---------------------------------------------------------------- readiness


async def test_readiness_gates_is_ready_and_calls_on_change_on_each_flip(node: Node) -> None:
    p, cid = await node.pod("u1", readinessProbe=exec_probe("ready"))
    spec = p["spec"]["containers"][0]
    assert node.pm.is_ready({"name": "x"}, "other")  # no readiness probe: ready
    node.pm.add_pod(p)
    assert not node.pm.is_ready(spec, cid)  # before any probe: not ready
    await node.ticker.tick()
    assert node.pm.is_ready(spec, cid) and node.changes == ["u1"]
    assert node.pm.results["readiness"][cid] is Result.SUCCESS
    await node.ticker.tick(3)  # more successes change nothing
    assert node.changes == ["u1"]

    node.rt.exit_code[cid] = 1
    await node.ticker.tick(2)
    assert node.pm.is_ready(spec, cid)  # 2 < failureThreshold 3
    await node.ticker.tick()
    assert not node.pm.is_ready(spec, cid) and node.changes == ["u1", "u1"]
    assert node.rt.execs(cid, "ready") == 7
    assert node.pm.must_restart(cid) is None  # readiness never restarts


async def test_readiness_success_threshold_needs_consecutive_successes(node: Node) -> None:
    probe = exec_probe("ready", successThreshold=3, failureThreshold=1)
    p, cid = await node.pod("u1", readinessProbe=probe)
    spec = p["spec"]["containers"][0]
    node.pm.add_pod(p)
    await node.ticker.tick(2)
    assert not node.pm.is_ready(spec, cid)
    node.rt.exit_code[cid] = 1  # a failure resets the run of successes
    await node.ticker.tick()
    node.rt.exit_code[cid] = 0
    await node.ticker.tick(2)
    assert not node.pm.is_ready(spec, cid) and node.changes == []
    await node.ticker.tick()
    assert node.pm.is_ready(spec, cid) and node.changes == ["u1"]
    node.rt.exit_code[cid] = 1
    await node.ticker.tick()  # failureThreshold 1: one failure is enough
    assert not node.pm.is_ready(spec, cid) and node.changes == ["u1", "u1"]


async def test_readiness_fails_when_the_container_stops_running(node: Node) -> None:
    p, cid = await node.pod("u1", readinessProbe=exec_probe("ready"))
    spec = p["spec"]["containers"][0]
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.pm.is_ready(spec, cid)
    cs = node.statuses["u1"]["containerStatuses"][0]
    cs["state"] = {"terminated": {"exitCode": 0}}
    await node.ticker.tick()
    assert not node.pm.is_ready(spec, cid) and node.changes == ["u1", "u1"]
    assert node.rt.execs(cid) == 1  # not probed once it stopped


async def test_no_status_yet_means_no_probe(node: Node) -> None:
    p, cid = await node.pod("u1", readinessProbe=exec_probe("ready"))
    del node.statuses["u1"]
    node.pm.add_pod(p)
    await node.ticker.tick(2)
    assert node.rt.execs(cid) == 0 and node.changes == []
    node.running("u1", cid)
    await node.ticker.tick()
    assert node.rt.execs(cid) == 1 and node.changes == ["u1"]


# ----------------------------------------------------------------- liveness


async def test_liveness_failure_threshold_then_must_restart_and_hold(node: Node) -> None:
    p, cid = await node.pod("u1", livenessProbe=exec_probe("live", failureThreshold=2))
    node.pm.add_pod(p)
    await node.ticker.tick(2)
    assert node.pm.must_restart(cid) is None and node.changes == []  # success is the start
    node.rt.exit_code[cid] = 1
    await node.ticker.tick()
    assert node.pm.must_restart(cid) is None
    await node.ticker.tick()
    assert node.pm.must_restart(cid) == "failed liveness probe"
    assert node.changes == ["u1"]
    # On hold until a new container appears: no more exec into the failing one.
    await node.ticker.tick(3)
    assert node.rt.execs(cid, "live") == 4

    # The runtime manager restarted it: a new ID starts over from success.
    new = await node.container("u1")
    node.running("u1", new)
    await node.ticker.tick()
    assert node.pm.must_restart(new) is None
    assert node.pm.must_restart(cid) is None  # the old container's result is dropped
    assert node.rt.execs(new, "live") == 1


async def test_liveness_unhealthy_events_for_every_failed_attempt(node: Node) -> None:
    p, cid = await node.pod("u1", livenessProbe=exec_probe("live"))
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.recorder.events == []  # successes record nothing
    node.rt.exit_code[cid] = 3
    await node.ticker.tick(3)
    assert len(node.recorder.events) == 3
    ref, etype, reason, msg = node.recorder.events[0]
    assert (etype, reason, msg) == ("Warning", "Unhealthy", "Liveness probe failed: live broke")
    assert ref["fieldPath"] == "spec.containers{c}"
    assert (ref["kind"], ref["name"], ref["namespace"], ref["uid"]) == ("Pod", "pod-u1", "ns", "u1")


async def test_an_exec_error_is_unknown_and_a_timeout_is_a_failure(node: Node) -> None:
    p, cid = await node.pod("u1", livenessProbe=exec_probe("live", failureThreshold=1))
    node.pm.add_pod(p)
    node.rt.inject_error("exec_sync", errors.UnavailableError("ExecSync", "runtime down"), 3)
    await node.ticker.tick(3)
    assert node.pm.must_restart(cid) is None  # the probe could not run: no verdict
    assert node.recorder.events == [] and node.changes == []
    node.rt.inject_error("exec_sync", errors.DeadlineExceededError("ExecSync", "deadline exceeded"))
    await node.ticker.tick()
    assert node.pm.must_restart(cid) == "failed liveness probe"
    assert node.recorder.events[0][3] == "Liveness probe failed: command timed out after 1s"


# ------------------------------------------------------------------ startup


async def test_startup_probe_gates_liveness_and_readiness(node: Node) -> None:
    p, cid = await node.pod(
        "u1",
        startupProbe=exec_probe("start", failureThreshold=10),
        livenessProbe=exec_probe("live"),
        readinessProbe=exec_probe("ready"),
    )
    spec = p["spec"]["containers"][0]
    assert node.pm.is_started({"name": "x"}, "x")  # no startup probe: started
    node.rt.exit_code[cid] = 1
    node.pm.add_pod(p)
    await node.ticker.tick(3)
    assert not node.pm.is_started(spec, cid) and not node.pm.is_ready(spec, cid)
    assert node.rt.execs(cid, "start") == 3
    assert node.rt.execs(cid, "live") == node.rt.execs(cid, "ready") == 0
    node.rt.exit_code[cid] = 0
    await node.ticker.tick()
    assert node.pm.is_started(spec, cid) and node.changes[0] == "u1"
    # From now on the other two run (in this tick or the next, by worker order).
    await node.ticker.tick()
    assert node.rt.execs(cid, "live") >= 1 and node.rt.execs(cid, "ready") >= 1
    assert node.pm.is_ready(spec, cid) and node.changes == ["u1", "u1"]


async def test_startup_failure_threshold_restarts(node: Node) -> None:
    p, cid = await node.pod("u1", startupProbe=exec_probe("start", failureThreshold=3))
    node.rt.exit_code[cid] = 1
    node.pm.add_pod(p)
    await node.ticker.tick(2)
    assert node.pm.must_restart(cid) is None
    await node.ticker.tick()
    assert node.pm.must_restart(cid) == "failed startup probe"
    assert [e[3] for e in node.recorder.events] == ["Startup probe failed: start broke"] * 3
    await node.ticker.tick(2)
    assert node.rt.execs(cid) == 3  # held


async def test_startup_probe_stops_once_the_container_started(node: Node) -> None:
    p, cid = await node.pod("u1", startupProbe=exec_probe("start", failureThreshold=1))
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.pm.is_started(p["spec"]["containers"][0], cid)
    node.rt.exit_code[cid] = 1  # e.g. the startup check reads a file that is gone now
    await node.ticker.tick(2)
    assert node.pm.must_restart(cid) is None
    assert node.rt.execs(cid, "start") == 1


# ----------------------------------------------------------- initial delay


async def test_initial_delay_counts_from_the_container_start(node: Node) -> None:
    p, cid = await node.pod("u1", livenessProbe=exec_probe("live", initialDelaySeconds=5))
    node.running("u1", cid, started=T0 - 2)
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.rt.execs(cid) == 0  # 2 s since start
    node.clock.step(2.5)
    await node.ticker.tick()
    assert node.rt.execs(cid) == 0  # 4.5 s
    node.clock.step(0.5)
    await node.ticker.tick()
    assert node.rt.execs(cid) == 1  # 5 s: due


async def test_period_defaults_to_ten_seconds_and_the_first_probe_is_spread(node: Node) -> None:
    p, _ = await node.pod(
        "u1",
        livenessProbe={"exec": {"command": ["x"]}, "periodSeconds": 7},
        readinessProbe={"exec": {"command": ["y"]}},
    )
    p2, _ = await node.pod("u2", readinessProbe={"exec": {"command": ["z"]}, "periodSeconds": 0})
    node.pm.add_pod(p)
    node.pm.add_pod(p2)
    await node.ticker.tick()
    jitter, periods = node.ticker.slept[:3], node.ticker.slept[3:]
    assert all(0 <= j <= 1 for j in jitter)  # the first probe is spread over <= 1 s
    assert sorted(periods) == [7, 10, 10]  # periodSeconds, or 10 when unset or 0


# ------------------------------------------------------ workers' lifetimes


async def test_add_pod_is_idempotent_and_remove_pod_stops_its_workers(node: Node) -> None:
    p1, c1 = await node.pod("u1", livenessProbe=exec_probe("live"), readinessProbe=exec_probe("r"))
    p2, c2 = await node.pod("u2", readinessProbe=exec_probe("r"))
    node.pm.add_pod(p1)
    node.pm.add_pod(p1)  # every sync calls it: still one worker per probe
    node.pm.add_pod(p2)
    assert len(node.pm) == 3
    await node.ticker.tick()
    tasks = [t for k, t in node.pm._workers.items() if k[0] == "u1"]
    node.pm.remove_pod("u1")
    assert len(node.pm) == 1
    await asyncio.sleep(0)
    assert all(t.cancelled() for t in tasks)
    await node.ticker.tick(2)
    assert node.rt.execs(c1) == 2 and node.rt.execs(c2) == 3
    node.pm.add_pod(p1)  # re-added (the pod came back): probes again
    await node.ticker.tick()
    assert node.rt.execs(c1) == 4


async def test_remove_pod_forgets_its_results(node: Node) -> None:
    p, cid = await node.pod("u1", livenessProbe=exec_probe("l"), readinessProbe=exec_probe("r"))
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert cid in node.pm.results["readiness"]
    node.pm.remove_pod("u1")
    await asyncio.sleep(0)
    assert all(cid not in r for r in node.pm.results.values())


async def test_stop_leaves_no_tasks_and_closes_the_prober(node: Node) -> None:
    p, _ = await node.pod("u1", livenessProbe=exec_probe("l"), readinessProbe=exec_probe("r"))
    node.pm.add_pod(p)
    await node.ticker.tick()
    tasks = [t for w in node.pm._workers.values() for t in w.values()]
    closed: list[bool] = []
    orig = node.pm.prober.close

    async def close() -> None:
        closed.append(True)
        await orig()

    node.pm.prober.close = close  # type: ignore[method-assign]
    await node.pm.stop()
    assert len(node.pm) == 0 and tasks and all(t.done() for t in tasks)
    assert closed == [True]
    leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("probe-")]
    assert leftovers == []


async def test_a_crashing_probe_does_not_end_the_worker(node: Node) -> None:
    p, cid = await node.pod("u1", readinessProbe=exec_probe("r"))
    calls = 0
    orig = node.pm.prober.probe

    async def probe(*a: Any) -> tuple[Result, str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("bug")
        return await orig(*a)

    node.pm.prober.probe = probe  # type: ignore[method-assign,assignment]
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert len(node.pm) == 1 and not node.pm.is_ready(p["spec"]["containers"][0], cid)
    await node.ticker.tick()
    assert node.pm.is_ready(p["spec"]["containers"][0], cid)


# ------------------------------------------------------------- HTTP and TCP


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[int, dict[str, Any]]]:
    state: dict[str, Any] = {"status": 200, "requests": []}

    async def health(request: web.Request) -> web.Response:
        state["requests"].append((request.path, dict(request.headers)))
        return web.Response(status=state["status"], text="ok")

    app = web.Application()
    app.router.add_get("/healthz", health)
    async with serving(app) as port:
        yield port, state


async def test_http_readiness_against_a_local_server(
    node: Node, http_server: tuple[int, dict[str, Any]]
) -> None:
    port, state = http_server
    probe = {
        "httpGet": {
            "path": "healthz",
            "port": "web",
            "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
        },
        "failureThreshold": 1,
    }
    p, cid = await node.pod("u1", readinessProbe=probe)
    spec = p["spec"]["containers"][0]
    spec["ports"] = [{"name": "web", "containerPort": port}]  # a named port
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.pm.is_ready(spec, cid)
    path, headers = state["requests"][0]
    assert path == "/healthz"  # the missing slash is added; host is the pod IP
    assert headers["X-Probe"] == "yes" and headers["User-Agent"].startswith("kube-probe/")
    state["status"] = 503
    await node.ticker.tick()
    assert not node.pm.is_ready(spec, cid) and node.changes == ["u1", "u1"]
    assert (
        node.recorder.events[-1][3]
        == "Readiness probe failed: HTTP probe failed with statuscode: 503"
    )


async def test_tcp_liveness_restarts_when_the_port_closes(node: Node) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = {"tcpSocket": {"port": port}, "failureThreshold": 2}
    p, cid = await node.pod("u1", livenessProbe=probe)
    node.pm.add_pod(p)
    try:
        await node.ticker.tick(2)
        assert node.pm.must_restart(cid) is None
    finally:
        server.close()
        await server.wait_closed()
    await node.ticker.tick()
    assert node.pm.must_restart(cid) is None
    await node.ticker.tick()
    assert node.pm.must_restart(cid) == "failed liveness probe"
    assert node.recorder.events[-1][3].startswith(
        f"Liveness probe failed: dial tcp 127.0.0.1:{port}"
    )


async def test_tcp_probe_with_an_explicit_host(node: Node) -> None:
    port = free_port()  # nothing listens there
    probe = {"tcpSocket": {"host": "127.0.0.1", "port": port}, "failureThreshold": 1}
    p, cid = await node.pod("u1", readinessProbe=probe)
    node.running("u1", cid, ip="192.0.2.1")  # unroutable: the host field must win
    node.pm.add_pod(p)
    await node.ticker.tick()
    assert node.recorder.events[0][3].startswith(
        f"Readiness probe failed: dial tcp 127.0.0.1:{port}"
    )


async def test_probe_results_are_counted_per_container_and_dropped_with_the_pod(
    node: Node,
) -> None:
    """/metrics/probes: prober_probe_total by result, one series per container
    probe, removed when the pod's workers stop."""
    from kubelet.metrics import PROBER_PROBE_TOTAL

    p, cid = await node.pod("u9", readinessProbe=exec_probe("ready"))
    labels = ("Readiness", "successful", "c", "pod-u9", "ns", "u9")
    failed = ("Readiness", "failed", *labels[2:])
    node.pm.add_pod(p)
    await node.ticker.tick(2)
    node.rt.exit_code[cid] = 1
    await node.ticker.tick()
    assert PROBER_PROBE_TOTAL.labels(*labels)._value.get() == 2
    assert PROBER_PROBE_TOTAL.labels(*failed)._value.get() == 1
    node.pm.remove_pod("u9")
    await asyncio.sleep(0)
    names = {s.labels.get("pod_uid") for m in PROBER_PROBE_TOTAL.collect() for s in m.samples}
    assert "u9" not in names


async def test_http_probe_follows_local_redirects_and_stops_at_another_host() -> None:
    """As upstream's prober (followNonLocalRedirects=false): a redirect on the
    same host is followed; one to another host is not (a Warning, which counts
    as success); ten redirects are the limit."""
    from kubelet.prober.prober import Prober, Result

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/local":
            raise web.HTTPFound("/ok")
        if request.path == "/away":
            raise web.HTTPFound("http://example.invalid:81/elsewhere")
        if request.path == "/loop":
            raise web.HTTPFound("/loop")
        if request.path == "/bare":
            return web.Response(status=302)
        return web.Response(text="fine")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    async with serving(app) as port:
        prober = Prober(None)
        pod: dict[str, Any] = {"metadata": {"name": "p"}, "status": {"podIP": "127.0.0.1"}}
        try:

            async def probe(path: str) -> tuple[Result, str]:
                spec = {"httpGet": {"path": path, "port": port}, "timeoutSeconds": 5}
                return await prober.probe(pod, {"name": "c"}, "cid", spec)

            assert await probe("/local") == (Result.SUCCESS, "fine")
            result, out = await probe("/away")
            assert result is Result.WARNING and out.startswith("Probe terminated redirects")
            assert (await probe("/bare"))[0] is Result.WARNING
            result, out = await probe("/loop")
            assert result is Result.FAILURE and "stopped after 10 redirects" in out
        finally:
            await prober.close()
