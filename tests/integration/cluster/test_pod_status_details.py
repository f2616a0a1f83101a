"""Pod status details of v1.34 on real containers (our kubelet on a private
containerd, the real kube-apiserver, controller-manager and scheduler), each
checked on the pod's watch stream, not only its last state:

- observedGeneration (PodObservedGenerationTracking): status and conditions
  follow metadata.generation from 1 through spec updates, 500 quick ones
  included, an image fix, a rejected pod and a graceful deletion;
- ephemeral-storage limits: pods over a container's limit, an emptyDir's
  sizeLimit or their total end Failed/Evicted with upstream's messages and
  their containers stopped; a pod under its limits keeps running;
- a host port already taken: the StatefulSet's pod is rejected (NodePorts),
  Failed, re-created by the controller until the port is free, then runs;
- an init container failing in a restartPolicy Never pod: no regular container
  ever reported started or running, from creation through deletion (upstream's
  "should never report container start when an init container fails").
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import pod_manifest, start_node
from tests.integration.cluster.podwatch import Event, PodWatch

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-podstatus-node"
STRATEGIC = "application/strategic-merge-patch+json"  # containers merge by name
NS = "default"
KUBELET_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("podstatus-kubelet")
    # Volumes measured every 2 s instead of every minute, so an emptyDir over
    # its sizeLimit is seen by the next eviction pass.
    k = start_node(
        control_plane, tmp, containerd.endpoint,
        node_name=NODE, config={"volumeStatsAggPeriod": "2s"},
    )  # fmt: skip
    try:
        wait_for("the Node to be Ready", k.ready, timeout=90)
        yield k
    finally:
        k.kubectl("delete", "statefulset", "-n", NS, "-l", "podstatus", "--wait=false",
                     check=False)  # fmt: skip
        k.kubectl("delete", "pods", "-n", NS, "-l", "podstatus", "--wait=false", check=False)
        k.stop()
        print(f"kubelet log: {k.log}")


def pod(name: str, case: str, command: str, **spec: Any) -> dict[str, Any]:
    p = pod_manifest(name, {"podstatus": case}, command, **spec)
    p["spec"].update(nodeName=NODE, terminationGracePeriodSeconds=1)
    p["spec"]["automountServiceAccountToken"] = False
    return p


def api(k: KubeletProcess, *requests: tuple[str, str, Any]) -> list[Any]:
    """Send requests (method, path, body) one after the other, as a controller does."""

    async def run() -> list[Any]:
        client = APIClient(load_kubeconfig(k.cp.admin_kubeconfig), qps=1000, burst=1000)
        try:
            out = []
            for method, path, body in requests:
                ctype = STRATEGIC if method == "PATCH" else "application/json"
                out.append(await client.request(method, path, body, content_type=ctype))
            return out
        finally:
            await client.close()

    return asyncio.run(run())


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{name}"


def statuses(events: list[Event]) -> list[dict[str, Any]]:
    return [p for kind, p in events if kind != "DELETED"]


def conditions(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}


def observed(p: dict[str, Any]) -> bool:
    """The status answers the pod's current generation, every kubelet condition too."""
    gen = p["metadata"]["generation"]
    conds = conditions(p)
    return p["status"].get("observedGeneration") == gen and all(
        conds.get(t, {}).get("observedGeneration") == gen for t in KUBELET_CONDITIONS
    )


def assert_generations_never_step_back(events: list[Event]) -> None:
    last_status = 0
    last_cond: dict[str, int] = {}
    for p in statuses(events):
        og = p["status"].get("observedGeneration", 0)
        assert og >= last_status, f"observedGeneration went back {last_status} -> {og}"
        assert og <= p["metadata"]["generation"]
        last_status = og
        for t, c in conditions(p).items():
            g = c.get("observedGeneration", 0)
            assert g >= last_cond.get(t, 0), f"{t} observedGeneration went back"
            last_cond[t] = g


# ------------------------------------------------------ observedGeneration


def test_observed_generation_follows_spec_updates(node: KubeletProcess) -> None:
    k = node
    with PodWatch(k.cp.admin_kubeconfig, NS, "podstatus=generation") as w:
        gen = pod("gen", "generation", "sleep 100000", activeDeadlineSeconds=5000,
                  initContainers=[{"name": "init", "image": "busybox:1.36",
                                   "command": ["true"]}])  # fmt: skip
        # Starts on an image that cannot be pulled (upstream's e2e does the same).
        fixed = pod("gen-image", "generation", "sleep 100000")
        fixed["spec"]["containers"][0]["image"] = "example.invalid/no-such-image:1"
        k.create(gen, fixed)
        w.wait_for("gen Running at generation 1", lambda _: _is(w.last("gen"), "Running", 1))
        # The image fix is a spec update the kubelet acts on: a new generation.
        w.wait_for("gen-image's conditions at generation 1", lambda _: _observed(w, "gen-image", 1))
        api(k, ("PATCH", pod_path("gen-image"),
                {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}))  # fmt: skip
        w.wait_for("gen-image Running at generation 2",
                   lambda _: _is(w.last("gen-image"), "Running", 2))  # fmt: skip
        # 500 quick spec updates, as a controller may make them: the last status
        # carries the last generation.
        api(k, *[("PATCH", pod_path("gen"), {"spec": {"activeDeadlineSeconds": 4999 - i}})
                 for i in range(500)])  # fmt: skip
        final = api(k, ("GET", pod_path("gen"), None))[0]
        assert final["metadata"]["generation"] == 501
        w.wait_for("gen at generation 501", lambda _: _observed(w, "gen", 501), timeout=120)
        # A graceful deletion bumps the generation once more; the final status
        # answers it before the pod goes.
        k.kubectl("delete", "pod", "gen", "gen-image", "-n", NS, "--wait=false")
        w.wait_for("gen deleted", functools.partial(_deleted, w, "gen"))
        w.wait_for("gen-image deleted", functools.partial(_deleted, w, "gen-image"))
    for name in ("gen", "gen-image"):
        events = w.of(name)
        assert_generations_never_step_back(events)
        last = statuses(events)[-1]
        assert last["metadata"]["deletionTimestamp"]
        assert last["status"]["observedGeneration"] == last["metadata"]["generation"]
    assert statuses(w.of("gen"))[-1]["metadata"]["generation"] == 502


def _is(p: dict[str, Any] | None, phase: str, gen: int) -> bool:
    return (
        p is not None
        and p["status"].get("phase") == phase
        and p["metadata"]["generation"] == gen
        and observed(p)
    )


def _observed(w: PodWatch, name: str, gen: int) -> bool:
    p = w.last(name)
    return p is not None and p["metadata"]["generation"] == gen and observed(p)


def test_a_rejected_pod_reports_the_generation_it_was_rejected_at(node: KubeletProcess) -> None:
    k = node
    with PodWatch(k.cp.admin_kubeconfig, NS, "podstatus=rejected") as w:
        big = pod("too-big", "rejected", "sleep 100000")
        big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000000"}}
        k.create(big)
        p = w.wait_for("too-big rejected",
                       lambda _: _failed(w.last("too-big")))  # fmt: skip
    st = p["status"]
    assert st["reason"] == "OutOfcpu" and st["message"].startswith("Pod was rejected: ")
    assert p["metadata"]["generation"] == 1 and st["observedGeneration"] == 1
    assert st["qosClass"] == "Burstable" and st.get("startTime")
    k.kubectl("delete", "pod", "too-big", "-n", NS, "--wait=false")


def _failed(p: dict[str, Any] | None) -> dict[str, Any] | None:
    return p if p is not None and p["status"].get("phase") == "Failed" else None


# ---------------------------------------------------- ephemeral storage


def _mib(n: int, where: str) -> str:
    return f"dd if=/dev/urandom of={where} bs=1048576 count={n} && sync"


def test_pods_over_their_ephemeral_storage_limits_are_evicted(
    node: KubeletProcess, containerd: Containerd
) -> None:
    k = node
    limit = {"limits": {"ephemeral-storage": "5Mi"}}
    scratch = [{"name": "scratch", "mountPath": "/scratch"}]
    pods = [
        # Upstream's "evicted pods should be terminal": its writable layer.
        pod("es-rootfs", "ephemeral", f"{_mib(10, '/file')}; sleep 100000"),
        # An emptyDir over its sizeLimit.
        pod("es-emptydir", "ephemeral", f"{_mib(3, '/scratch/f')}; sleep 100000",
            volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]),
        # The pod's total: 12 MiB in an unlimited emptyDir against 2 x 5Mi.
        pod("es-total", "ephemeral", f"{_mib(12, '/scratch/f')}; sleep 100000",
            volumes=[{"name": "scratch", "emptyDir": {}}]),
        # One container over its own limit while the pod's total is fine.
        pod("es-container", "ephemeral", f"{_mib(8, '/file')}; sleep 100000"),
        # Under every limit: keeps running.
        pod("es-fine", "ephemeral", f"{_mib(1, '/file')}; sleep 100000",
            volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "4Mi"}}]),
    ]  # fmt: skip
    pods[0]["spec"]["containers"][0]["resources"] = limit
    pods[1]["spec"]["containers"][0]["volumeMounts"] = scratch
    pods[2]["spec"]["containers"][0]["resources"] = limit
    pods[2]["spec"]["containers"][0]["volumeMounts"] = scratch
    pods[2]["spec"]["containers"].append(
        {"name": "second", "image": "busybox:1.36", "command": ["sleep", "100000"],
         "resources": limit}
    )  # fmt: skip
    pods[3]["spec"]["containers"][0]["resources"] = limit
    pods[3]["spec"]["containers"].append(
        {"name": "roomy", "image": "busybox:1.36", "command": ["sleep", "100000"],
         "resources": {"limits": {"ephemeral-storage": "1Gi"}}}
    )  # fmt: skip
    pods[4]["spec"]["containers"][0]["resources"] = limit
    pods[4]["spec"]["containers"][0]["volumeMounts"] = scratch
    want = {
        "es-rootfs": "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. ",
        "es-emptydir": 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ',
        "es-total": "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
        "es-container": 'Container main exceeded its local ephemeral storage limit "5Mi". ',
    }
    with PodWatch(k.cp.admin_kubeconfig, NS, "podstatus=ephemeral") as w:
        k.create(*pods)
        for name in want:
            w.wait_for(f"{name} evicted, its containers stopped",
                       functools.partial(_stopped, w, name), timeout=180)  # fmt: skip
        fine = w.last("es-fine")
        assert fine is not None and fine["status"]["phase"] == "Running"
        running = _running_container_ids(containerd)
    for name, message in want.items():
        events = statuses(w.of(name))
        final = events[-1]["status"]
        assert (final["phase"], final["reason"], final["message"]) == ("Failed", "Evicted", message)
        # Terminal once: never back to Pending or Running after Failed.
        phases = [p["status"].get("phase") for p in events]
        assert "Failed" not in phases[: phases.index("Failed")] and set(
            phases[phases.index("Failed") :]
        ) == {"Failed"}, phases
        # Local storage evictions carry no DisruptionTarget (upstream passes none).
        assert "DisruptionTarget" not in conditions(events[-1])
        # Really stopped in containerd, not only reported so.
        ids = {c["containerID"].split("//")[-1] for c in final["containerStatuses"]}
        assert not ids & running, f"{name}: containers still running"
    events = k.kubectl_json("get", "events", "-n", NS, "--field-selector",
                            "involvedObject.name=es-emptydir")["items"]  # fmt: skip
    assert {(e["reason"], e["message"]) for e in events} >= {("Evicted", want["es-emptydir"])}


def _stopped(w: PodWatch, name: str, _: list[Event]) -> bool:
    p = w.last(name)
    if p is None or p["status"].get("phase") != "Failed":
        return False
    return all("terminated" in c["state"] for c in p["status"].get("containerStatuses") or [])


def _running_container_ids(ctd: Containerd) -> set[str]:
    out = ctd.ctr("-n", "k8s.io", "tasks", "ls").stdout.splitlines()[1:]
    return {line.split()[0] for line in out if line.split()[-1] == "RUNNING"}


# ------------------------------------------------------------- host ports


def test_a_statefulset_pod_refused_for_a_taken_host_port_is_recreated(
    node: KubeletProcess,
) -> None:
    """Upstream's conformance "Should recreate evicted statefulset", on our kubelet."""
    k = node
    port = {"containerPort": 21017, "hostPort": 21017, "name": "conflict"}
    holder = pod("port-holder", "ports", "sleep 100000")
    holder["spec"]["containers"][0]["ports"] = [port]
    labels = {"podstatus": "ports", "app": "ss-ports"}
    ss: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ss-ports", "namespace": NS, "labels": {"podstatus": "ports"}},
        "spec": {
            "replicas": 1,
            "serviceName": "ss-ports",
            "selector": {"matchLabels": {"app": "ss-ports"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {**pod("x", "ports", "sleep 100000")["spec"]},
            },
        },
    }
    ss["spec"]["template"]["spec"]["containers"][0]["ports"] = [port]
    with PodWatch(k.cp.admin_kubeconfig, NS, "podstatus=ports") as w:
        k.create(holder)
        w.wait_for("the port holder Running",
                   lambda _: (w.last("port-holder") or {}).get("status", {}).get("phase")
                   == "Running")  # fmt: skip
        k.create(ss)

        def refused_and_replaced(_: list[Event]) -> bool:
            uids = {p["metadata"]["uid"] for _k, p in w.of("ss-ports-0")}
            deleted = [p for t, p in w.of("ss-ports-0") if t == "DELETED"]
            return len(uids) >= 2 and bool(deleted)

        w.wait_for("ss-ports-0 refused, deleted and re-created", refused_and_replaced)
        k.kubectl("delete", "pod", "port-holder", "-n", NS, "--grace-period=0", "--force")

        def running_anew(_: list[Event]) -> bool:
            p = w.last("ss-ports-0")
            return bool(p and p["status"].get("phase") == "Running")

        w.wait_for("ss-ports-0 Running once the port is free", running_anew, timeout=180)
    first_uid = w.of("ss-ports-0")[0][1]["metadata"]["uid"]
    refused = [p["status"] for p in statuses(w.of("ss-ports-0", first_uid))
               if p["status"].get("phase") == "Failed"]  # fmt: skip
    assert refused, "the first ss-ports-0 never reported Failed"
    assert refused[-1]["reason"] == "NodePorts"
    assert refused[-1]["message"] == (
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports "
        "for the requested pod ports"
    )
    assert refused[-1]["observedGeneration"] == 1
    # A refused pod never ran anything.
    assert not any(
        "running" in c.get("state", {})
        for p in statuses(w.of("ss-ports-0", first_uid))
        for c in p["status"].get("containerStatuses") or []
    )
    k.kubectl("delete", "statefulset", "ss-ports", "-n", NS, "--wait=false")


# ------------------------------------------------- init container failure


def _init_fail_pod(name: str) -> dict[str, Any]:
    """Upstream's pod for this scenario (podFastDeleteScenario with an init container)."""
    requests = {"requests": {"cpu": "5m", "memory": "10Mi"}}
    p = pod(name, "initfail", "true", restartPolicy="Never")
    p["spec"]["containers"][0].update(name="blocked", command=["/bin/true"], resources=requests)
    p["spec"]["initContainers"] = [{"name": "fail", "image": "busybox:1.36",
                                    "command": ["/bin/false"], "resources": requests}]  # fmt: skip
    return p


def _deleted(w: PodWatch, name: str, _: list[Event]) -> bool:
    return any(t == "DELETED" for t, _p in w.of(name))


def verify_init_failure_stream(name: str, events: list[Event]) -> list[str]:
    """Upstream's podStartVerifier with an init container, on one pod's events."""
    errs: list[str] = []
    terminated = terminal = had_inits = had_mains = False
    for kind, p in events:
        st = p.get("status") or {}
        inits, mains = st.get("initContainerStatuses") or [], st.get("containerStatuses") or []
        if (
            len(inits) > 1
            or len(mains) > 1
            or (had_inits and not inits)
            or (had_mains and not mains)
        ):
            errs.append(f"{name} {kind}: wrong or vanished container statuses {st}")
        had_inits, had_mains = had_inits or bool(inits), had_mains or bool(mains)
        for c in mains:
            if (
                c.get("started")
                or "terminated" in (c.get("lastState") or {})
                or ("waiting" not in c.get("state", {}))
            ):
                errs.append(f"{name} {kind}: the blocked container was reported started: {c}")
            elif c["state"]["waiting"].get("reason") != "PodInitializing":
                # The conformance spec's own check (init_container.go).
                errs.append(f"{name} {kind}: blocked container not PodInitializing: {c}")
        for c in inits:
            t = c.get("state", {}).get("terminated")
            if terminated and t is None:
                errs.append(f"{name} {kind}: init container left terminated: {c}")
            if t is not None:
                terminated = True
                ok = t["exitCode"] == 1 or (
                    t["exitCode"] == 137 and t.get("reason") in ("ContainerStatusUnknown", "Error")
                )
                if not ok:
                    errs.append(f"{name} {kind}: unexpected init exit {t}")
        phase = st.get("phase")
        if phase in ("Failed", "Succeeded"):
            terminal = True
        elif terminal and kind != "DELETED":
            errs.append(f"{name} {kind}: left terminal phase for {phase}")
    if not terminal and events:
        phase = (events[-1][1].get("status") or {}).get("phase")
        if phase != "Pending":
            errs.append(f"{name}: deleted while {phase}, neither terminal nor Pending")
    return errs


def test_a_failed_init_container_never_reports_a_regular_container_started(
    node: KubeletProcess,
) -> None:
    k = node
    errors: list[str] = []
    names: list[str] = []
    with PodWatch(k.cp.admin_kubeconfig, NS, "podstatus=initfail") as w:
        # One pod left to fail on its own first, then deleted.
        k.create(_init_fail_pod("initfail-slow"))
        w.wait_for("initfail-slow Failed", lambda _: _failed(w.last("initfail-slow")))
        k.kubectl("delete", "pod", "initfail-slow", "-n", NS, "--wait=false")
        names.append("initfail-slow")

        # Upstream's scenario: create, delete after a random delay under 2 s,
        # several workers at once.
        def worker(i: int) -> None:
            rnd = random.Random(i)
            for attempt in range(6):
                n = f"initfail-{i}-{attempt}"
                names.append(n)
                k.create(_init_fail_pod(n))
                time.sleep(rnd.random() * 2)
                k.kubectl("delete", "pod", n, "-n", NS, "--wait=false")
                w.wait_for(f"{n} deleted", functools.partial(_deleted, w, n), timeout=120)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.wait_for("initfail-slow deleted", functools.partial(_deleted, w, "initfail-slow"))
    for n in names:
        events = w.of(n)
        assert events and events[-1][0] == "DELETED", f"{n}: no deletion seen"
        errors += verify_init_failure_stream(n, events)
    slow = statuses(w.of("initfail-slow"))
    assert any(p["status"].get("phase") == "Failed" for p in slow)
    assert not errors, "\n".join(errors)


def test_the_stream_verifier_catches_a_started_container() -> None:
    """The verifier above is not vacuous: a stream that reports the blocked
    container running, or a terminal phase reverting, is an error."""
    started = {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "blocked", "started": True, "state": {"running": {}}}]}}  # fmt: skip
    assert verify_init_failure_stream("x", [("MODIFIED", started)])
    back = [("MODIFIED", {"status": {"phase": "Failed"}}),
            ("MODIFIED", {"status": {"phase": "Running"}})]  # fmt: skip
    assert verify_init_failure_stream("x", back)
    fine = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "blocked",
                    "started": False,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
            "initContainerStatuses": [{"name": "fail", "state": {"terminated": {"exitCode": 1}}}],
        }
    }
    assert verify_init_failure_stream("x", [("MODIFIED", fine), ("DELETED", fine)]) == []
