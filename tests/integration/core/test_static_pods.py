"""The node core end to end on the simulated runtime (standalone mode, static pods)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kubelet.cri.api import api_pb2 as pb
from kubelet.metrics import REGISTRY
from kubelet.pod_workers import PodWork, UpdateType
from kubelet.testing.wait import wait_for_async

BUSYBOX = "busybox:1.36"


def forever(name: str = "c") -> dict:
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", "sleep infinity"]}


async def test_200_pods_run_then_50_are_removed(node) -> None:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    for i in range(200):
        node.write(f"p{i:03d}", [forever()])
    await node.wait(
        lambda: sum(node.phase(f"p{i:03d}") == "Running" for i in range(200)) == 200,
        timeout=30,
        what="200 pods Running",
    )
    elapsed = time.monotonic() - t
    assert elapsed < 30
    sandboxes = await node.rt.list_pod_sandbox()
    assert len([s for s in sandboxes if s.state == pb.SANDBOX_READY]) == 200
    removed = {f"p{i:03d}-node-a" for i in range(0, 200, 4)}
    kept_ids = {
        c.id
        for c in await node.rt.list_containers()
        if c.labels["io.kubernetes.pod.name"] not in removed
    }
    for i in range(0, 200, 4):
        (node.manifests / f"p{i:03d}.yaml").unlink()

    async def gone() -> bool:
        names = {s.metadata.name for s in await node.rt.list_pod_sandbox()}
        return not (names & removed) and len(names) == 150

    await wait_for_async("50 pods' sandboxes gone", gone, 30.0, 0.2, retry_on=())
    containers = await node.rt.list_containers()
    # exactly those pods' containers are gone; the others were not touched
    assert {c.id for c in containers} == kept_ids
    assert all(c.state == pb.CONTAINER_RUNNING for c in containers)
    assert len(node.kubelet.host.get_pods()) == 150


async def test_editing_a_manifest_restarts_only_the_changed_container(node) -> None:  # type: ignore[no-untyped-def]
    # A pinned UID keeps the pod; without it an edit is a new pod, as upstream.
    meta = {"uid": "7f1c0c1e-0000-4000-8000-000000000001"}
    node.write("edit", [forever("a"), forever("b")], metadata=meta)
    await node.wait(lambda: node.phase("edit") == "Running", what="edit Running")
    before = {c: node.container("edit", c)["containerID"] for c in ("a", "b")}
    changed = forever("b")
    changed["command"] = ["sh", "-c", "echo v2; sleep infinity"]
    node.write("edit", [forever("a"), changed], metadata=meta)
    await node.wait(
        lambda: (
            node.container("edit", "b")["containerID"] != before["b"]
            and "running" in node.container("edit", "b")["state"]
        ),
        what="b restarted",
    )
    assert node.container("edit", "a")["containerID"] == before["a"]
    assert node.container("edit", "b")["restartCount"] == 1
    assert node.pod("edit")["metadata"]["uid"] == meta["uid"]


async def test_exiting_container_restarts_with_growing_backoff(node) -> None:  # type: ignore[no-untyped-def]
    node.write("crash", [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", "exit 2"]}])
    seen_backoff = []

    def progressed() -> bool:
        c = node.container("crash", "c")
        w = c["state"].get("waiting", {})
        if w.get("reason") == "CrashLoopBackOff":
            seen_backoff.append(w["message"].split()[1])
        return c["restartCount"] >= 4 and len(set(seen_backoff)) >= 2

    await node.wait(progressed, timeout=30, what="4 restarts")
    c = node.container("crash", "c")
    assert c["lastState"]["terminated"]["exitCode"] == 2
    # the back-off doubles (500ms, 1s, 2s with the test's shrunk parameters)
    assert list(dict.fromkeys(seen_backoff))[:2] == ["500ms", "1s"], seen_backoff
    assert node.phase("crash") == "Running"


async def test_restart_policy_never_leaves_the_pod_failed(node) -> None:  # type: ignore[no-untyped-def]
    node.write(
        "once",
        [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", "sleep 0.3; exit 7"]}],
        restartPolicy="Never",
    )
    await node.wait(lambda: node.phase("once") == "Failed", what="Failed")
    term = node.container("once", "c")["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (7, "Error")
    assert node.container("once", "c")["restartCount"] == 0


async def test_init_container_completes_before_app_starts(node) -> None:  # type: ignore[no-untyped-def]
    node.write(
        "init",
        [forever("app")],
        initContainers=[
            {"name": "setup", "image": BUSYBOX, "command": ["sh", "-c", "sleep 1; exit 0"]}
        ],
    )
    await node.wait(
        lambda: "running" in node.container("init", "setup")["state"], what="init running"
    )
    assert node.container("init", "app")["state"]["waiting"]["reason"] == "PodInitializing"
    assert node.phase("init") == "Pending"
    await node.wait(lambda: node.phase("init") == "Running", what="init pod Running")
    setup = node.container("init", "setup")["state"]["terminated"]
    app_started = node.container("init", "app")["state"]["running"]["startedAt"]
    assert setup["exitCode"] == 0 and setup["finishedAt"] <= app_started


async def test_broken_manifest_is_reported_and_skipped(node, caplog) -> None:  # type: ignore[no-untyped-def]
    (node.manifests / "bad-yaml.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [oops\n")
    (node.manifests / "no-containers.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: empty}\nspec: {containers: []}\n"
    )
    (node.manifests / "bad-name.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec:\n"
        "  containers: [{name: c, image: busybox}]\n"
    )
    node.write("good", [forever()])
    await node.wait(lambda: node.phase("good") == "Running", what="good Running")
    text = caplog.text
    assert "bad-yaml.yaml" in text and "invalid YAML" in text
    assert "no-containers.yaml: spec.containers: Required value" in text
    assert "bad-name.yaml: metadata.name: Invalid value" in text
    assert [p["metadata"]["name"] for p in node.kubelet.host.get_pods()] == ["good-node-a"]


async def test_missing_image_reports_err_image_pull_then_backoff(node) -> None:  # type: ignore[no-untyped-def]
    node.write("noimg", [{"name": "c", "image": "example.com/app:missing", "command": ["true"]}])
    reasons: set[str] = set()

    def both() -> bool:
        w = node.container("noimg", "c")["state"].get("waiting", {})
        if w.get("reason"):
            reasons.add(w["reason"])
        return {"ErrImagePull", "ImagePullBackOff"} <= reasons

    await node.wait(both, what="ErrImagePull then ImagePullBackOff")
    msg = node.container("noimg", "c")["state"]["waiting"].get("message", "")
    assert "example.com/app:missing" in msg


async def test_image_pull_policy_never(node) -> None:  # type: ignore[no-untyped-def]
    node.write("never", [{"name": "c", "image": "not-here:1", "imagePullPolicy": "Never"}])
    await node.wait(
        lambda: node.container("never", "c")["state"]["waiting"]["reason"] == "ErrImageNeverPull",
        what="ErrImageNeverPull",
    )
    assert (
        "is not present with pull policy of Never"
        in node.container("never", "c")["state"]["waiting"]["message"]
    )


def _unused(path: Path) -> None:
    _ = path


async def test_unimplemented_fields_are_named_once_and_the_pod_still_runs(node, caplog) -> None:  # type: ignore[no-untyped-def]
    c = {**forever(), "lifecycle": {"stopSignal": "SIGUSR1"}}
    node.write("pulls", [c])
    await node.wait(lambda: node.phase("pulls") == "Running", what="pulls Running")
    # More syncs of the same pod: still one warning.
    pod = node.kubelet.pod_manager.get_by_full_name("pulls-node-a_default")
    node.kubelet.pod_workers.update_pod(PodWork(pod, UpdateType.SYNC))
    await asyncio.sleep(1.5)
    lines = [r.getMessage() for r in caplog.records if "not implemented" in r.getMessage()]
    assert lines == [
        "Pod pulls-node-a_default: Fields not implemented by this kubelet, ignored: "
        "spec.containers[c].lifecycle.stopSignal"
    ]


async def test_a_manifest_removed_and_written_back_restarts_its_pod(node) -> None:  # type: ignore[no-untyped-def]
    """Node e2e 'MirrorPod ... should successfully recreate when file is removed
    and recreated': the same manifest again (same UID) while the old pod is still
    stopping runs the pod again once it has stopped, with restart count 1."""
    restarted = ("kubelet_restarted_pods_total", {"static": "true"})
    before = REGISTRY.get_sample_value(*restarted) or 0.0
    path = node.write("again", [forever()])
    await node.wait(lambda: node.phase("again") == "Running", what="again Running")
    first = node.container("again", "c")["containerID"]
    text = path.read_text()
    path.unlink()
    path.write_text(text)
    await node.wait(
        lambda: (
            node.container("again", "c")["containerID"] != first
            and "running" in node.container("again", "c")["state"]
        ),
        what="again restarted",
    )
    assert node.container("again", "c")["restartCount"] == 1
    # Started again on housekeeping's one path (re-admitted, counted), never
    # by a sync for the old UID (the old container's death seen by the PLEG).
    assert REGISTRY.get_sample_value(*restarted) == before + 1


async def test_working_pods_are_counted_each_housekeeping_pass(node) -> None:  # type: ignore[no-untyped-def]
    """kubelet_working_pods: a running static pod is sync/desired/static; once
    its manifest is gone and it has stopped, housekeeping forgets it."""

    def working(life: str, config: str = "desired", static: str = "true") -> float | None:
        labels = {"lifecycle": life, "config": config, "static": static}
        return REGISTRY.get_sample_value("kubelet_working_pods", labels)

    path = node.write("counted", [forever()])
    await node.wait(lambda: working("sync") == 1, what="one static pod working")
    assert working("sync", static="") == 0 and working("terminated") == 0
    assert working("terminating", "runtime_only", "unknown") == 0
    path.unlink()
    await node.wait(
        lambda: working("sync") == 0 and working("terminated") == 0
        and working("terminated", "orphan") == 0 and working("terminating", "orphan") == 0,
        what="the removed pod stopped and forgotten",
    )  # fmt: skip


async def test_container_ids_name_the_runtime_as_its_version_answer_does(node) -> None:  # type: ignore[no-untyped-def]
    node.write("named", [forever()])
    await node.wait(lambda: node.phase("named") == "Running", timeout=20, what="Running")
    assert node.kubelet.runtime.state.runtime_name() == "simruntime"
    assert node.container("named", "c")["containerID"].startswith("simruntime://")
