"""Hooks, sidecars, activeDeadlineSeconds and ephemeral containers end to end: a
Kubelet with static pods on the simulated runtime, then the same on containerd."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from kubelet.config.config import Op, PodUpdate
from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import EventLog, InProcessKubelet
from kubelet.testing.net import free_port

BUSYBOX = "busybox:1.36"


class Events:
    """The node's events as (fieldPath, reason, message) per pod."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def of(self, pod: str) -> list[tuple[str, str, str]]:
        return [
            (ref.get("fieldPath", ""), r, m)
            for ref, (n, _t, r, m) in zip(self.log.refs, self.log.events, strict=True)
            if n == f"{pod}-node-a"
        ]


def record(node: InProcessKubelet) -> Events:
    return Events(node.record_events())


def ctr(name: str, script: str, image: str = BUSYBOX, **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["sh", "-c", script], **kw}


# ------------------------------------------------------------ simulated runtime
async def test_hooks_bad_input_is_reported_and_nothing_else_disturbed(node) -> None:  # type: ignore[no-untyped-def]
    ev = record(node)
    good = {"postStart": {"exec": {"command": ["sh", "-c", "echo ok"]}}}
    node.write("good", [ctr("c", "sleep infinity", lifecycle=good)])
    node.write(
        "nocmd",
        [ctr("c", "sleep infinity", lifecycle={"postStart": {"exec": {"command": ["/bin/nope"]}}})],
    )
    port = free_port()
    http = {"postStart": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/hook"}}}
    node.write("closed", [ctr("c", "sleep infinity", lifecycle=http)])
    await node.wait(lambda: node.phase("good") == "Running", what="good Running")
    await node.wait(
        lambda: node.container("nocmd", "c")["restartCount"] >= 2, what="nocmd restarted"
    )
    await node.wait(
        lambda: (
            ("spec.containers{c}", "FailedPostStartHook", "PostStartHook failed") in ev.of("closed")
        ),
        what="closed port event",
    )
    assert ("spec.containers{c}", "FailedPostStartHook", "PostStartHook failed") in ev.of("nocmd")
    assert ("spec.containers{c}", "Killing", "FailedPostStartHook") in ev.of("nocmd")
    w = node.container("nocmd", "c")["state"].get("waiting") or {}
    if w.get("reason") == "PostStartHookError":
        assert w["message"].startswith('Exec lifecycle hook ([/bin/nope]) for Container "c"')
        assert "exited with 127" in w["message"]
    # the healthy pod never restarted and saw no hook event
    assert node.container("good", "c")["restartCount"] == 0
    assert not [e for e in ev.of("good") if "Hook" in e[1]]


async def test_sidecar_job_completes_and_sidecar_is_stopped(node) -> None:  # type: ignore[no-untyped-def]
    node.write(
        "job",
        [ctr("main", "sleep 1; exit 0")],
        initContainers=[
            ctr("side", "sleep infinity", restartPolicy="Always"),
            ctr("setup", "exit 0"),
        ],
        restartPolicy="Never",
    )
    await node.wait(
        lambda: node.container("job", "side")["started"] is True, what="sidecar started"
    )
    await node.wait(lambda: node.phase("job") == "Succeeded", timeout=30, what="Succeeded")
    st = node.pod("job")["status"]
    side = node.container("job", "side")
    assert "terminated" in side["state"]
    assert node.container("job", "main")["state"]["terminated"]["exitCode"] == 0
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Initialized"]["status"] == "True"
    assert conds["Ready"]["reason"] == "PodCompleted"


async def test_sidecar_startup_probe_gates_main_and_readiness_counts(node) -> None:  # type: ignore[no-untyped-def]
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    node.write(
        "probed",
        [ctr("main", "sleep infinity")],
        initContainers=[
            ctr(
                "side",
                "sleep infinity",
                restartPolicy="Always",
                startupProbe=probe,
                readinessProbe={"exec": {"command": ["false"]}, "periodSeconds": 1},
            )
        ],
    )
    await node.wait(
        lambda: "running" in node.container("probed", "side")["state"], what="sidecar running"
    )
    if node.container("probed", "side")["started"] is False:
        # not started yet: main has not been started either
        assert "running" not in node.container("probed", "main")["state"]
    await node.wait(lambda: node.container("probed", "side")["started"], what="side started")
    await node.wait(
        lambda: "running" in node.container("probed", "main")["state"], what="main running"
    )
    conds = {c["type"]: c for c in node.pod("probed")["status"]["conditions"]}
    assert conds["Initialized"]["status"] == "True"
    # the sidecar's readiness probe fails: the pod is not ready, and says why
    assert conds["ContainersReady"]["status"] == "False"
    assert conds["ContainersReady"]["message"] == "containers with unready status: [side]"


async def test_crash_looping_sidecar_restarts_beside_main(node) -> None:  # type: ignore[no-untyped-def]
    ev = record(node)
    node.write(
        "flaky",
        [ctr("main", "sleep infinity")],
        initContainers=[ctr("side", "sleep 0.3; exit 1", restartPolicy="Always")],
    )
    await node.wait(
        lambda: node.container("flaky", "side")["restartCount"] >= 2, what="sidecar restarts"
    )
    assert node.phase("flaky") == "Running"
    main = node.container("flaky", "main")
    assert "running" in main["state"] and main["restartCount"] == 0
    await node.wait(lambda: any(r == "BackOff" for _, r, _ in ev.of("flaky")), what="BackOff event")
    conds = {c["type"]: c for c in node.pod("flaky")["status"]["conditions"]}
    assert conds["Initialized"]["status"] == "True"


async def test_active_deadline_fails_the_pod(node) -> None:  # type: ignore[no-untyped-def]
    ev = record(node)
    node.write("late", [ctr("c", "sleep infinity")], activeDeadlineSeconds=2)
    node.write("ontime", [ctr("c", "sleep infinity")])
    await node.wait(lambda: node.phase("late") == "Running", what="Running")
    await node.wait(lambda: node.phase("late") == "Failed", timeout=10, what="Failed")
    st = node.pod("late")["status"]
    assert st["reason"] == "DeadlineExceeded"
    assert st["message"] == "Pod was active on the node longer than the specified deadline"
    await node.wait(
        lambda: "terminated" in node.container("late", "c")["state"], what="container killed"
    )
    assert ("", "DeadlineExceeded", st["message"]) in ev.of("late")
    assert node.phase("ontime") == "Running"


async def test_ephemeral_container_started_once_in_the_running_pod(node) -> None:  # type: ignore[no-untyped-def]
    node.write("dbg", [ctr("main", "sleep infinity")])
    await node.wait(lambda: node.phase("dbg") == "Running", what="Running")
    pod = copy.deepcopy(node.kubelet.pod_manager.get(node.pod("dbg")["metadata"]["uid"]))
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": BUSYBOX, "command": ["sh", "-c", "echo hi; exit 3"],
         "targetContainerName": "main"}
    ]  # fmt: skip
    node.kubelet.handle_update(PodUpdate(Op.UPDATE, [pod], "file"))

    def eph() -> dict[str, Any]:
        st = node.pod("dbg")["status"]
        return {c["name"]: c for c in st["ephemeralContainerStatuses"]}["debugger"]

    await node.wait(lambda: "terminated" in eph()["state"], what="ephemeral ran")
    assert eph()["state"]["terminated"]["exitCode"] == 3
    cid = eph()["containerID"]
    await asyncio.sleep(1.5)  # several relists and syncs later
    await node.wait(lambda: node.phase("dbg") == "Running", what="still Running")
    assert eph()["containerID"] == cid and eph()["restartCount"] == 0  # never restarted
    assert node.container("dbg", "main")["restartCount"] == 0


# ----------------------------------------------------------------- containerd
def _log(node, pod: str, cname: str, n: int = 0) -> str:  # type: ignore[no-untyped-def]
    uid = node.pod(pod)["metadata"]["uid"]
    path = node.manifests.parent / "logs" / f"default_{pod}-node-a_{uid}" / cname / f"{n}.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.containerd
async def test_containerd_post_start_writes_what_main_reads(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "echo from-poststart > /tmp/hook"]}}}
    main = "until [ -f /tmp/hook ]; do sleep 0.1; done; cat /tmp/hook; sleep infinity"
    node.write("post", [ctr("c", main, BUSYBOX_REF, lifecycle=hook)])
    await node.wait(lambda: node.phase("post") == "Running", timeout=60, what="Running")
    await node.wait(lambda: "from-poststart" in _log(node, "post", "c"), timeout=10, what="log")
    assert node.container("post", "c")["restartCount"] == 0


@pytest.mark.containerd
async def test_containerd_deadline_kills_with_pre_stop_before_sigterm(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    ev = record(node)
    # The TERM trap prints what the preStop hook left: there only if it ran first.
    script = (
        "trap 'cat /tmp/pre; echo got-TERM; exit 0' TERM; echo started; "
        "while true; do sleep 0.2; done"
    )
    hook = {"preStop": {"exec": {"command": ["sh", "-c", "echo in-prestop > /tmp/pre"]}}}
    node.write(
        "late",
        [ctr("c", script, BUSYBOX_REF, lifecycle=hook)],
        activeDeadlineSeconds=4,
        terminationGracePeriodSeconds=10,
        restartPolicy="Never",
    )
    await node.wait(lambda: node.phase("late") == "Running", timeout=60, what="Running")
    await node.wait(lambda: node.phase("late") == "Failed", timeout=20, what="Failed")
    st = node.pod("late")["status"]
    assert (st["reason"], st["message"]) == (
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    )
    await node.wait(lambda: "got-TERM" in _log(node, "late", "c"), timeout=15, what="TERM")
    log = _log(node, "late", "c")
    assert "in-prestop" in log, (log, ev.of("late"))
    assert log.index("in-prestop") < log.index("got-TERM")
    assert not [e for e in ev.of("late") if e[1] == "FailedPreStopHook"]


@pytest.mark.containerd
async def test_containerd_sidecar_serves_a_file_main_reads(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    side = "mkdir -p /www && echo sidecar-data > /www/f && exec httpd -f -p 8080 -h /www"
    main = "until wget -q -O- http://127.0.0.1:8080/f; do sleep 0.2; done; sleep infinity"
    node.write(
        "side",
        [ctr("main", main, BUSYBOX_REF)],
        initContainers=[ctr("web", side, BUSYBOX_REF, restartPolicy="Always")],
    )
    await node.wait(lambda: node.phase("side") == "Running", timeout=60, what="Running")
    await node.wait(lambda: "sidecar-data" in _log(node, "side", "main"), timeout=15, what="read")
    web = node.container("side", "web")
    assert web["started"] is True and web["ready"] is True and "running" in web["state"]
    conds = {c["type"]: c["status"] for c in node.pod("side")["status"]["conditions"]}
    assert conds["Initialized"] == conds["ContainersReady"] == conds["Ready"] == "True"


@pytest.mark.containerd
async def test_containerd_missing_hook_command(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    ev = record(node)
    hook = {"postStart": {"exec": {"command": ["/bin/does-not-exist"]}}}
    # `sleep` as PID 1 ignores SIGTERM: the kill after the failed hook takes the
    # whole grace period, so keep it short (the restart then comes ~10 s later).
    node.write(
        "nocmd",
        [ctr("c", "sleep infinity", BUSYBOX_REF, lifecycle=hook)],
        terminationGracePeriodSeconds=2,
    )
    node.write("fine", [ctr("c", "sleep infinity", BUSYBOX_REF)])
    await node.wait(
        lambda: node.container("nocmd", "c")["restartCount"] >= 1, timeout=60, what="restart"
    )
    assert ("spec.containers{c}", "FailedPostStartHook", "PostStartHook failed") in ev.of("nocmd")
    await node.wait(lambda: node.phase("fine") == "Running", timeout=60, what="fine Running")
    assert node.container("fine", "c")["restartCount"] == 0
    json.dumps(node.pod("nocmd")["status"])  # serializable as the API wants it
