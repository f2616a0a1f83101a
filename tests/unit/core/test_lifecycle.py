"""Container lifecycle: hook runner (exec, httpGet, sleep), postStart/preStop in the
runtime manager, sidecar and ephemeral container decisions (computePodActions as a
table), sidecar termination order, and the API status they produce."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web

from kubelet.config.common import apply_defaults
from kubelet.container.runtime import (
    CREATED,
    EXITED,
    RUNNING,
    ContainerStatus,
    PodStatus,
    SandboxStatus,
)
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.lifecycle.handlers import USER_AGENT, HandlerRunner
from kubelet.metrics import REGISTRY
from kubelet.status.generate import generate, get_phase
from kubelet.testing.helpers import standalone_runtime_helper
from kubelet.testing.net import free_port, serving
from kubelet.unsupported import unsupported_fields


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, str, str, str]] = []  # (fieldPath, type, reason, message)

    def event(self, ref: dict[str, Any], etype: str, reason: str, message: str) -> None:
        self.items.append((ref.get("fieldPath", ""), etype, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, _, r, _ in self.items]


def pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    # Ephemeral containers come through their subresource, never a manifest.
    ephemeral = spec.pop("ephemeralContainers", None)
    p = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": containers, **spec},
    }
    out = apply_defaults(p, "/m/p.yaml", "file", "n1")
    if ephemeral is not None:
        out["spec"]["ephemeralContainers"] = ephemeral
    return out


def c(name: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", **kw}


def sidecar(name: str, **kw: Any) -> dict[str, Any]:
    return c(name, restartPolicy="Always", **kw)


def fmt(p: dict[str, Any]) -> str:
    m = p["metadata"]
    return f"{m['name']}_{m['namespace']}({m['uid']})"


# ------------------------------------------------------------- hook runner
async def no_ips(_pod: dict[str, Any]) -> list[str]:
    return []


async def local_ip(_pod: dict[str, Any]) -> list[str]:
    return ["127.0.0.1"]


async def running_container(rt: FakeRuntimeService) -> str:
    sb = await rt.run_pod_sandbox(
        pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", namespace="default", uid="u"))
    )
    cid = await rt.create_container(
        sb, pb.ContainerConfig(metadata=pb.ContainerMetadata(name="a")), pb.PodSandboxConfig()
    )
    await rt.start_container(cid)
    return cid


async def test_exec_hook_runs_through_exec_sync() -> None:
    rt = FakeRuntimeService()
    cid = await running_container(rt)
    r = HandlerRunner(rt, no_ips)
    p = pod([c("a")])
    hook = {"exec": {"command": ["sh", "-c", "echo hi > /tmp/x"]}}
    assert await r.run(cid, p, p["spec"]["containers"][0], hook, timeout=7) is None
    assert rt.called("exec_sync")[0] == (cid, ["sh", "-c", "echo hi > /tmp/x"], 7)
    # a container the runtime does not know: the CRI error, as the Go client prints it
    msg = await r.run("nope", p, p["spec"]["containers"][0], hook)
    assert msg == (
        'Exec lifecycle hook ([sh -c echo hi > /tmp/x]) for Container "a" in Pod '
        f'"{fmt(p)}" failed - error: rpc error: code = NotFound desc = container nope '
        'not found, message: ""'
    )


async def test_exec_hook_non_zero_exit_message() -> None:
    rt = FakeRuntimeService()

    async def exec_sync(cid: str, cmd: list[str], timeout: float) -> pb.ExecSyncResponse:
        msg = b'exec: "/bin/nope": executable file not found in $PATH'
        return pb.ExecSyncResponse(stdout=b"out", stderr=msg, exit_code=127)

    rt.exec_sync = exec_sync  # type: ignore[method-assign]
    r = HandlerRunner(rt, no_ips)
    p = pod([c("a")])
    msg = await r.run("c1", p, p["spec"]["containers"][0], {"exec": {"command": ["/bin/nope"]}})
    assert msg == (
        f'Exec lifecycle hook ([/bin/nope]) for Container "a" in Pod "{fmt(p)}" failed - '
        "error: command '/bin/nope' exited with 127: exec: \"/bin/nope\": executable file "
        'not found in $PATH, message: "outexec: \\"/bin/nope\\": executable file not found '
        'in $PATH"'
    )


@pytest.fixture
async def http_server():  # type: ignore[no-untyped-def]
    seen: list[web.Request] = []

    async def handler(req: web.Request) -> web.StreamResponse:
        seen.append(req)
        if req.path == "/redirect-here":
            raise web.HTTPFound("/landed")
        if req.path == "/redirect-away":
            raise web.HTTPFound("http://192.0.2.1:9/elsewhere")
        if req.path == "/loop":
            raise web.HTTPFound("/loop")
        return web.Response(status=500 if req.path == "/error" else 200, text="ok")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    async with serving(app) as port:
        yield port, seen


async def test_http_hook_defaults_and_named_port(http_server) -> None:  # type: ignore[no-untyped-def]
    port, seen = http_server
    r = HandlerRunner(FakeRuntimeService(), local_ip)
    p = pod([c("a", ports=[{"name": "web", "containerPort": port}])])
    ctr = p["spec"]["containers"][0]
    hook = {
        "httpGet": {
            "path": "echo?msg=poststart",
            "port": "web",
            "httpHeaders": [{"name": "X-Hook", "value": "1"}],
        }
    }
    try:
        assert await r.run("c1", p, ctr, hook) is None
        req = seen[-1]
        assert req.path == "/echo" and req.query["msg"] == "poststart"
        assert req.headers["User-Agent"] == USER_AGENT == "kube-lifecycle/1.34"
        assert req.headers["Accept"] == "*/*" and req.headers["X-Hook"] == "1"
        # any HTTP answer counts: upstream does not look at the status code
        assert await r.run("c1", p, ctr, {"httpGet": {"path": "/error", "port": port}}) is None
        # same-host redirects are followed, others are not (and still succeed)
        assert (
            await r.run("c1", p, ctr, {"httpGet": {"path": "/redirect-here", "port": port}}) is None
        )
        assert seen[-1].path == "/landed"
        n = len(seen)
        assert (
            await r.run("c1", p, ctr, {"httpGet": {"path": "/redirect-away", "port": port}}) is None
        )
        assert len(seen) == n + 1 and seen[-1].path == "/redirect-away"  # 192.0.2.1 never asked
        msg = await r.run("c1", p, ctr, {"httpGet": {"path": "/loop", "port": port}})
        assert msg is not None and "stopped after 10 redirects" in msg
        msg = await r.run("c1", p, ctr, {"httpGet": {"path": "/", "port": "nope"}})
        assert msg is not None and "couldn't find port: nope" in msg
    finally:
        await r.close()


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_https_hook_at_a_plain_http_server_falls_back_and_is_counted(  # type: ignore[no-untyped-def]
    http_server,
) -> None:
    port, seen = http_server
    ev = Events()
    r = HandlerRunner(FakeRuntimeService(), local_ip, recorder=ev)
    p = pod([c("a")])
    before = _sample("kubelet_lifecycle_handler_http_fallbacks_total")
    hook = {"httpGet": {"path": "/x", "port": port, "scheme": "HTTPS"}}
    try:
        assert await r.run("c1", p, p["spec"]["containers"][0], hook) is None
    finally:
        await r.close()
    assert seen[-1].path == "/x" and "LifecycleHTTPFallback" in ev.reasons()
    assert _sample("kubelet_lifecycle_handler_http_fallbacks_total") == before + 1


def test_only_a_plain_http_answer_makes_an_https_hook_fall_back() -> None:
    from kubelet.lifecycle.handlers import _looks_like_plain_http

    assert _looks_like_plain_http(OSError("[SSL: WRONG_VERSION_NUMBER] wrong version number"))
    assert not _looks_like_plain_http(OSError("[SSL: CERTIFICATE_VERIFY_FAILED] self-signed"))
    assert not _looks_like_plain_http(OSError("[SSL: SSLV3_ALERT_HANDSHAKE_FAILURE] ssl alert"))


async def test_http_hook_closed_port_and_no_ip() -> None:
    port = free_port()  # nothing listens there
    r = HandlerRunner(FakeRuntimeService(), local_ip)
    p = pod([c("a")])
    try:
        msg = await r.run(
            "c1", p, p["spec"]["containers"][0], {"httpGet": {"path": "/x", "port": port}}
        )
        assert msg == (
            f'HTTP lifecycle hook (/x) for Container "a" in Pod "{fmt(p)}" failed - error: '
            f'Get "http://127.0.0.1:{port}/x": dial tcp 127.0.0.1:{port}: connect: '
            "connection refused"
        )
        r2 = HandlerRunner(FakeRuntimeService(), no_ips)
        msg = await r2.run("c1", p, p["spec"]["containers"][0], {"httpGet": {"port": port}})
        assert msg is not None and "failed to find networking container" in msg
    finally:
        await r.close()


async def test_sleep_hook_and_invalid_handler() -> None:
    r = HandlerRunner(FakeRuntimeService(), no_ips)
    p = pod([c("a")])
    t = time.monotonic()
    assert await r.run("c1", p, p["spec"]["containers"][0], {"sleep": {"seconds": 0}}) is None
    assert time.monotonic() - t < 0.5
    task = asyncio.ensure_future(
        r.run("c1", p, p["spec"]["containers"][0], {"sleep": {"seconds": 60}})
    )
    await asyncio.sleep(0.05)
    early = _sample("kubelet_sleep_action_terminated_early_total")
    task.cancel()  # the caller gives up (the grace period ran out)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _sample("kubelet_sleep_action_terminated_early_total") == early + 1
    msg = await r.run("c1", p, p["spec"]["containers"][0], {})
    assert msg is not None and msg.startswith("Cannot run handler: invalid handler")


# -------------------------------------------------------- runtime manager
def manager(
    tmp_path, rt: FakeRuntimeService, events: Events | None = None, **kw: Any
) -> RuntimeManager:  # type: ignore[no-untyped-def]
    helper = standalone_runtime_helper(str(tmp_path))
    return RuntimeManager(
        rt, FakeImageService(["busybox:1.36"]), helper, str(tmp_path), recorder=events, **kw
    )


async def status(m: RuntimeManager, p: dict[str, Any]) -> PodStatus:
    return await m.get_pod_status(p["metadata"]["uid"])


async def test_post_start_runs_after_start_and_failure_kills(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt, ev = FakeRuntimeService(), Events()
    m = manager(tmp_path, rt, ev)
    p = pod([c("a", lifecycle={"postStart": {"exec": {"command": ["touch", "/ready"]}}})])
    res = await m.sync_pod(p, await status(m, p))
    assert res.ok
    order = [n for n, _ in rt.calls if n in ("start_container", "exec_sync")]
    assert order == ["start_container", "exec_sync"]
    assert "FailedPostStartHook" not in ev.reasons()

    # a failing hook: event without the message, the container killed, waiting reason
    rt2, ev2 = FakeRuntimeService(), Events()
    m2 = manager(tmp_path, rt2, ev2)
    rt2.inject_error("exec_sync", errors.CRIError("ExecSync", "exec failed: no such file"))
    q = pod([c("b", lifecycle={"postStart": {"exec": {"command": ["/nope"]}}})])
    res = await m2.sync_pod(q, await status(m2, q))
    assert not res.ok and res.errors[0].startswith("Exec lifecycle hook ([/nope])")
    assert (
        "spec.containers{b}",
        "Warning",
        "FailedPostStartHook",
        "PostStartHook failed",
    ) in ev2.items
    assert ("spec.containers{b}", "Normal", "Killing", "FailedPostStartHook") in ev2.items
    st = await status(m2, q)
    assert st.containers[0].state == EXITED
    reason, msg = m2.waiting[q["metadata"]["uid"]]["b"]
    assert reason == "PostStartHookError" and msg == res.errors[0]
    api = generate(q, st, m2.waiting[q["metadata"]["uid"]], ["10.0.0.1"], None)
    assert api["containerStatuses"][0]["state"]["waiting"]["reason"] == "PostStartHookError"
    # it is restarted per policy (Always): the next sync starts it again
    assert m2.compute_pod_actions(q, st).containers_to_start == [0]


async def test_pre_stop_runs_first_and_eats_the_grace_period(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt, ev = FakeRuntimeService(), Events()
    m = manager(tmp_path, rt, ev)
    p = pod(
        [c("a", lifecycle={"preStop": {"sleep": {"seconds": 1}}}), c("b")],
        terminationGracePeriodSeconds=5,
    )
    await m.sync_pod(p, await status(m, p))
    await m.kill_pod(p, await status(m, p), None, remove=False)
    stops = {args[0]: args[1] for args in rt.called("stop_container")}
    st = await status(m, p)
    assert stops[st.find("a").id] == 4  # type: ignore[union-attr]
    assert stops[st.find("b").id] == 5  # type: ignore[union-attr]

    # deletionGracePeriodSeconds wins; exec hook gets the grace as its timeout
    q = pod([c("x", lifecycle={"preStop": {"exec": {"command": ["echo", "bye"]}}})])
    q["metadata"]["deletionGracePeriodSeconds"] = 3
    await m.sync_pod(q, await status(m, q))
    cid = (await status(m, q)).containers[0].id
    await m.kill_pod(q, await status(m, q), None, remove=False)
    names = [(n, a[0]) for n, a in rt.calls if n in ("exec_sync", "stop_container") and a[0] == cid]
    assert names == [("exec_sync", cid), ("stop_container", cid)]
    assert rt.called("exec_sync")[-1][2] == 3 and rt.called("stop_container")[-1][1] == 3


async def test_hanging_pre_stop_cannot_extend_the_grace_period(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt, ev = FakeRuntimeService(), Events()
    m = manager(tmp_path, rt, ev)
    p = pod(
        [c("a", lifecycle={"preStop": {"sleep": {"seconds": 3600}}})],
        terminationGracePeriodSeconds=1,
    )
    await m.sync_pod(p, await status(m, p))
    t = time.monotonic()
    await m.kill_pod(p, await status(m, p), None, remove=False)
    assert time.monotonic() - t < 2
    assert rt.called("stop_container")[-1][1] == 2  # minimumGracePeriodInSeconds
    # a failing preStop hook: an event, and the stop goes on
    rt.inject_error("exec_sync", errors.CRIError("ExecSync", "boom"))
    q = pod([c("b", lifecycle={"preStop": {"exec": {"command": ["x"]}}})])
    await m.sync_pod(q, await status(m, q))
    await m.kill_pod(q, await status(m, q), None, remove=False)
    assert ("spec.containers{b}", "Warning", "FailedPreStopHook", "PreStopHook failed") in ev.items
    assert (await status(m, q)).containers[0].state == EXITED
    # grace 0 (a forced kill): no hook at all
    n = len(rt.called("exec_sync"))
    r = pod([c("z", lifecycle={"preStop": {"exec": {"command": ["x"]}}})])
    await m.sync_pod(r, await status(m, r))
    await m.kill_pod(r, await status(m, r), 0, remove=True)
    assert len(rt.called("exec_sync")) == n


async def test_sidecars_stop_after_main_containers_in_reverse_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt = FakeRuntimeService()
    m = manager(tmp_path, rt)
    p = pod(
        [c("main", lifecycle={"preStop": {"sleep": {"seconds": 1}}})],
        initContainers=[sidecar("s1"), sidecar("s2")],
    )
    sb = await rt.run_pod_sandbox(m.sandbox_config(p, 0))
    st = PodStatus(p["metadata"]["uid"])
    for name, spec in (
        ("s1", p["spec"]["initContainers"][0]),
        ("s2", p["spec"]["initContainers"][1]),
        ("main", p["spec"]["containers"][0]),
    ):
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            labels=L.container_labels(p, spec),
        )
        cid = await rt.create_container(sb, cfg, pb.PodSandboxConfig())
        await rt.start_container(cid)
    st = await status(m, p)
    await m.kill_pod(p, st, None, remove=False)
    ids = {x.id: x.name for x in st.containers}
    order = [ids[a[0]] for a in rt.called("stop_container")]
    assert order == ["main", "s2", "s1"]


# ----------------------------------------------- computePodActions table
def cs(
    name: str, state: str, code: int = 0, spec: dict[str, Any] | None = None, t: int = 1
) -> ContainerStatus:
    return ContainerStatus(
        id=f"id-{name}",
        name=name,
        state=state,
        exit_code=code,
        created_at=t,
        hash=L.container_hash(spec) if spec else "",
    )


def pod_status(p: dict[str, Any], *containers: ContainerStatus) -> PodStatus:
    return PodStatus(
        p["metadata"]["uid"],
        ips=["10.0.0.2"],
        sandboxes=[SandboxStatus("sb", True, 1, 0, "10.0.0.2")],
        containers=sorted(containers, key=lambda x: -x.created_at),
    )


SIDECAR_POD = pod(
    [c("main")],
    initContainers=[
        sidecar("s1"),
        c("i2"),
        sidecar("s3", startupProbe={"exec": {"command": ["true"]}}),
    ],
)
NEVER_POD = pod([c("main")], initContainers=[sidecar("s1")], restartPolicy="Never")
EPH_POD = pod(
    [c("main")],
    ephemeralContainers=[{"name": "debug", "image": "busybox:1.36", "targetContainerName": "main"}],
)


@pytest.mark.parametrize(
    ("name", "p", "statuses", "started", "must_restart", "expect"),
    [
        (
            "new pod: sandbox, first init",
            SIDECAR_POD,
            None,
            {},
            {},
            dict(create_sandbox=True, init=[0]),
        ),
        ("s1 running gates i2", SIDECAR_POD, [("s1", RUNNING, 0)], {}, {}, dict(init=[1])),
        (
            "i2 running: wait",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", RUNNING, 0)],
            {},
            {},
            dict(init=[]),
        ),
        (
            "i2 done: s3",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0)],
            {},
            {},
            dict(init=[2]),
        ),
        (
            "s3 not started: main waits",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0), ("s3", RUNNING, 0)],
            {"id-s3": False},
            {},
            dict(init=[], start=[]),
        ),
        (
            "s3 started: main starts",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0), ("s3", RUNNING, 0)],
            {"id-s3": True},
            {},
            dict(init=[], start=[0]),
        ),
        (
            "s3 failed startup probe",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0), ("s3", RUNNING, 0)],
            {"id-s3": False},
            {"id-s3": "failed startup probe"},
            dict(init=[2], kill=["s3"]),
        ),
        (
            "all running: nothing",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0), ("s3", RUNNING, 0), ("main", RUNNING, 0)],
            {},
            {},
            dict(init=[], start=[]),
        ),
        (
            "crashed sidecar restarts beside main",
            SIDECAR_POD,
            [("s1", EXITED, 1), ("i2", EXITED, 0), ("s3", RUNNING, 0), ("main", RUNNING, 0)],
            {},
            {},
            dict(init=[0], start=[]),
        ),
        (
            "sidecar gone from runtime comes back, done init does not",
            SIDECAR_POD,
            [("s3", RUNNING, 0), ("main", RUNNING, 0)],
            {},
            {},
            dict(init=[0], start=[]),
        ),
        (
            "sidecar liveness failure",
            SIDECAR_POD,
            [("s1", RUNNING, 0), ("i2", EXITED, 0), ("s3", RUNNING, 0), ("main", RUNNING, 0)],
            {},
            {"id-s1": "failed liveness probe"},
            dict(init=[0], kill=["s1"]),
        ),
        (
            "job done: sidecars do not keep it alive",
            NEVER_POD,
            [("s1", RUNNING, 0), ("main", EXITED, 0)],
            {},
            {},
            dict(kill_pod=True, init=[], start=[]),
        ),
        (
            "job running",
            NEVER_POD,
            [("s1", RUNNING, 0), ("main", RUNNING, 0)],
            {},
            {},
            dict(kill_pod=False, init=[], start=[]),
        ),
        ("ephemeral started", EPH_POD, [("main", RUNNING, 0)], {}, {}, dict(eph=[0], start=[])),
        (
            "ephemeral never restarted",
            EPH_POD,
            [("main", RUNNING, 0), ("debug", EXITED, 1)],
            {},
            {},
            dict(eph=[], start=[]),
        ),
        (
            "ephemeral not killed as unknown",
            EPH_POD,
            [("main", RUNNING, 0), ("debug", RUNNING, 0)],
            {},
            {},
            dict(eph=[], kill=[]),
        ),
    ],
)
def test_compute_pod_actions(tmp_path, name, p, statuses, started, must_restart, expect) -> None:  # type: ignore[no-untyped-def]
    m = manager(
        tmp_path,
        FakeRuntimeService(),
        must_restart=lambda cid: must_restart.get(cid),
        is_started=lambda _c, cid: started.get(cid, True),
    )
    specs = {
        x["name"]: x
        for k in ("containers", "initContainers", "ephemeralContainers")
        for x in p["spec"].get(k) or []
    }
    if statuses is None:
        st = PodStatus(p["metadata"]["uid"])
    else:
        st = pod_status(
            p, *(cs(n, s, code, specs[n], t=i + 1) for i, (n, s, code) in enumerate(statuses))
        )
    a = m.compute_pod_actions(p, st)
    if "create_sandbox" in expect:
        assert a.create_sandbox is expect["create_sandbox"], name
    if "init" in expect:
        assert a.init_containers_to_start == expect["init"], name
    if "start" in expect:
        assert a.containers_to_start == expect["start"], name
    if "kill" in expect:
        assert sorted(x.name for x, _ in a.containers_to_kill.values()) == expect["kill"], name
    if "kill_pod" in expect:
        assert a.kill_pod is expect["kill_pod"], name
    if "eph" in expect:
        assert a.ephemeral_containers_to_start == expect["eph"], name


async def test_sidecar_pod_syncs_to_running_on_the_fake(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt = FakeRuntimeService()
    m = manager(tmp_path, rt)
    p = pod([c("main")], initContainers=[sidecar("s1"), c("i2")])
    for _ in range(4):
        await m.sync_pod(p, await status(m, p))
        st = await status(m, p)
        i2 = st.find("i2")
        if i2 is not None and i2.state == RUNNING:
            rt.set_exited(i2.id, 0)
    st = await status(m, p)
    assert {x.name: x.state for x in st.containers} == {
        "s1": RUNNING,
        "i2": EXITED,
        "main": RUNNING,
    }
    # an ephemeral container appears: started in the pod's sandbox, target pid namespace
    p["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "image": "busybox:1.36", "targetContainerName": "main"}
    ]
    assert (await m.sync_pod(p, st)).ok
    cfg = next(a[1] for a in rt.called("create_container") if a[1].metadata.name == "dbg")
    ns = cfg.linux.security_context.namespace_options
    assert ns.pid == pb.TARGET and ns.target_id == st.find("main").id  # type: ignore[union-attr]


# --------------------------------------------------------- status generation
class Probes:
    def __init__(
        self, ready: dict[str, bool] | None = None, started: dict[str, bool] | None = None
    ) -> None:
        self.ready, self.started_ = ready or {}, started or {}

    def is_ready(self, c: dict[str, Any], cid: str) -> bool:
        return self.ready.get(cid, True)

    def is_started(self, c: dict[str, Any], cid: str) -> bool:
        return self.started_.get(cid, True)


def _by_name(api: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    return {x["name"]: x for x in api.get(key, [])}


def _cond(api: dict[str, Any], t: str) -> dict[str, Any]:
    return next(x for x in api["conditions"] if x["type"] == t)


def test_pod_initializing_waiting_reasons() -> None:
    p = pod([c("app")], initContainers=[c("i1"), c("i2")])
    api = generate(p, pod_status(p), {}, ["10.0.0.1"], None)
    inits = _by_name(api, "initContainerStatuses")
    # upstream: every container of a pod with init containers waits with PodInitializing
    assert inits["i1"]["state"] == {"waiting": {"reason": "PodInitializing"}}
    api = generate(p, pod_status(p, cs("i1", RUNNING)), {}, ["10.0.0.1"], None)
    inits = _by_name(api, "initContainerStatuses")
    assert inits["i2"]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert api["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert api["phase"] == "Pending"
    init = _cond(api, "Initialized")
    assert init["status"] == "False" and init["reason"] == "ContainersNotInitialized"
    assert init["message"] == "containers with incomplete status: [i1 i2]"
    # without init containers: ContainerCreating; created-not-started: waiting, no reason
    q = pod([c("a"), c("b")])
    api = generate(q, pod_status(q, cs("a", CREATED)), {}, [], None)
    st = _by_name(api, "containerStatuses")
    assert st["a"]["state"] == {"waiting": {}}
    assert st["b"]["state"] == {"waiting": {"reason": "ContainerCreating"}}


def test_sidecar_status_and_conditions() -> None:
    p = pod([c("main")], initContainers=[sidecar("s1", readinessProbe={}), c("i2")])
    # s1 runs but is not started (startup probe pending): not initialized
    st = pod_status(p, cs("s1", RUNNING))
    api = generate(p, st, {}, [], None, Probes(started={"id-s1": False}))
    s1 = _by_name(api, "initContainerStatuses")["s1"]
    assert s1["started"] is False and s1["ready"] is False and api["phase"] == "Pending"
    assert _cond(api, "Initialized")["message"] == "containers with incomplete status: [s1 i2]"
    # all up, s1 not ready by its readiness probe: ContainersReady False naming s1
    st = pod_status(p, cs("s1", RUNNING, t=1), cs("i2", EXITED, 0, t=2), cs("main", RUNNING, t=3))
    api = generate(p, st, {}, [], None, Probes(ready={"id-s1": False}))
    assert api["phase"] == "Running" and _cond(api, "Initialized")["status"] == "True"
    for t in ("ContainersReady", "Ready"):
        assert _cond(api, t)["status"] == "False"
        assert _cond(api, t)["message"] == "containers with unready status: [s1]"
    api = generate(p, st, {}, [], None, Probes())
    assert (
        _cond(api, "ContainersReady")["status"] == "True"
        and _cond(api, "Ready")["status"] == "True"
    )
    s1 = _by_name(api, "initContainerStatuses")["s1"]
    assert s1["started"] is True and s1["ready"] is True
    # a crash-looping sidecar after initialization: still Initialized, still Running
    st = pod_status(p, cs("s1", EXITED, 1, t=4), cs("i2", EXITED, 0, t=2), cs("main", RUNNING, t=3))
    api = generate(p, st, {"s1": ("CrashLoopBackOff", "back-off")}, [], None, Probes())
    assert api["phase"] == "Running" and _cond(api, "Initialized")["status"] == "True"
    assert (
        _by_name(api, "initContainerStatuses")["s1"]["state"]["waiting"]["reason"]
        == "CrashLoopBackOff"
    )


def test_job_with_sidecar_completes() -> None:
    p = pod([c("main")], initContainers=[sidecar("s1")], restartPolicy="Never")
    st = pod_status(p, cs("s1", RUNNING, t=1), cs("main", EXITED, 0, t=2))
    assert generate(p, st, {}, [], None)["phase"] == "Running"  # sidecar still up
    st = pod_status(p, cs("s1", EXITED, 137, t=1), cs("main", EXITED, 0, t=2))
    api = generate(p, st, {}, [], None)
    assert api["phase"] == "Succeeded"
    assert _cond(api, "Ready")["reason"] == "PodCompleted"
    assert _cond(api, "Initialized") == {
        **_cond(api, "Initialized"),
        "status": "True",
        "reason": "PodCompleted",
    }


def test_get_phase_sidecars() -> None:
    p = pod([c("main")], initContainers=[sidecar("s1")], restartPolicy="Never")
    run = {"name": "s1", "state": {"running": {}}, "started": False}
    main_wait = {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}
    assert get_phase(p, [run], [main_wait]) == "Pending"
    # initialized before: a restarting sidecar does not put the pod back to Pending
    back = {
        "name": "s1",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1}},
    }
    main_run = {"name": "main", "state": {"running": {}}}
    assert get_phase(p, [back], [main_run], initialized=True) == "Running"


def test_ephemeral_container_status() -> None:
    p = pod([c("main")], ephemeralContainers=[{"name": "dbg", "image": "busybox:1.36"}])
    st = pod_status(p, cs("main", RUNNING, t=1), cs("dbg", RUNNING, t=2))
    api = generate(p, st, {}, [], None, Probes())
    eph = _by_name(api, "ephemeralContainerStatuses")["dbg"]
    assert "running" in eph["state"] and "started" not in eph and eph["ready"] is False
    st = pod_status(p, cs("main", RUNNING, t=1), cs("dbg", EXITED, 0, t=2))
    api = generate(p, st, {}, [], None, Probes())
    assert api["phase"] == "Running" and _cond(api, "Ready")["status"] == "True"


def test_unsupported_list_drops_implemented_fields() -> None:
    p = pod(
        [c("a", lifecycle={"preStop": {"sleep": {"seconds": 1}}})],
        initContainers=[sidecar("s")],
        activeDeadlineSeconds=5,
        ephemeralContainers=[{"name": "d", "image": "busybox:1.36"}],
    )
    assert unsupported_fields(p) == []
