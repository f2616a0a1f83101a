"""The `kubelet` command in cluster mode against the real control plane, on the
simulated runtime, checked the way a user would: with the built kubectl."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import NODE, pod_manifest, start_node

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("cluster-kubelet")
    sim = start_simruntime()
    k = start_node(control_plane, tmp, sim.endpoint)
    try:
        wait_for("the Node to be Ready", k.ready, timeout=60)
        yield k
    finally:
        k.stop()
        sim.stop()
        print(f"kubelet log: {k.log}")


def _pods(k: KubeletProcess, selector: str) -> list[dict[str, Any]]:
    return list(k.kubectl_json("get", "pods", "-n", "default", "-l", selector)["items"])


def test_node_is_ready_with_capacity_labels_and_a_renewing_lease(node: KubeletProcess) -> None:
    n = node.kubectl_json("get", "node", NODE)
    assert n["status"]["capacity"]["pods"] == "150"
    assert n["status"]["capacity"]["cpu"] == str(os.cpu_count())
    assert n["metadata"]["labels"]["example.com/pool"] == "py"
    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert n["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("simruntime://")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in n["status"]["addresses"]

    def images() -> bool:
        node_now = node.kubectl_json("get", "node", NODE)
        return any(
            any("busybox" in name for name in im["names"])
            for im in node_now["status"].get("images", [])
        )

    # The image list is refreshed every 30 s and sent with the next status update.
    wait_for("the node's images to list busybox", images, timeout=90, every=2)
    lease = node.kubectl_json("get", "lease", NODE, "-n", "kube-node-lease")
    first = lease["spec"]["renewTime"]
    assert lease["spec"]["holderIdentity"] == NODE
    wait_for(
        "the Lease to be renewed (every 2 s here)",
        lambda: (
            node.kubectl_json("get", "lease", NODE, "-n", "kube-node-lease")["spec"]["renewTime"]
            != first
        ),
        timeout=15,
    )
    events = node.kubectl_json(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={NODE}"
    )["items"]
    assert {"Starting", "NodeReady"} <= {e["reason"] for e in events}


def test_static_pod_has_a_mirror_pod_that_comes_back_when_deleted(node: KubeletProcess) -> None:
    name = f"static-web-{NODE}"

    def mirror() -> dict[str, Any] | None:
        p = node.kubectl_json("get", "pod", name, "-n", "default")
        ok = p["status"].get("phase") == "Running"
        return p if ok and "kubernetes.io/config.mirror" in p["metadata"]["annotations"] else None

    first = wait_for("the mirror pod to report Running", mirror, timeout=60)
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"
    node.kubectl("delete", "pod", name, "-n", "default", "--wait=false")
    second = wait_for(
        "the mirror pod to be recreated",
        lambda: (m := mirror()) and m["metadata"]["uid"] != first["metadata"]["uid"] and m,
        timeout=60,
    )
    # The static pod itself never stopped: the same container is still running.
    cs = second["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 0
    assert cs["containerID"] == first["status"]["containerStatuses"][0]["containerID"]


def test_100_pods_run_with_ips_and_deleting_them_removes_everything(
    node: KubeletProcess,
) -> None:
    pods = [
        pod_manifest(f"many-{i}", {"app": "many"}, "while true; do sleep 1; done")
        for i in range(100)
    ]
    node.create(*pods)

    def all_running() -> bool:
        items = _pods(node, "app=many")
        return len(items) == 100 and all(
            p["status"].get("phase") == "Running" and p["status"].get("podIP") for p in items
        )

    wait_for("100 pods Running with pod IPs", all_running, timeout=120, every=1)
    ips = {p["status"]["podIP"] for p in _pods(node, "app=many")}
    assert len(ips) == 100
    node.kubectl("delete", "pods", "-n", "default", "-l", "app=many", "--wait=false")
    wait_for("every pod gone from the API", lambda: not _pods(node, "app=many"), timeout=120)
    # Their containers are gone from the runtime too.
    import asyncio

    from kubelet.cri.remote import RemoteRuntimeService

    async def containers() -> list[Any]:
        rs = RemoteRuntimeService(node.endpoint, 10)
        try:
            return [
                c
                for c in await rs.list_containers()
                if c.labels.get("io.kubernetes.pod.name", "").startswith("many-")
            ]
        finally:
            await rs.close()

    wait_for(
        "the runtime to have no container of those pods", lambda: not asyncio.run(containers())
    )


def test_crash_looping_pod_has_events(node: KubeletProcess) -> None:
    node.create(pod_manifest("crasher", {"app": "crasher"}, "echo bye; exit 1"))

    def events() -> dict[str, str]:
        items = node.kubectl_json(
            "get", "events", "-n", "default", "--field-selector", "involvedObject.name=crasher"
        )["items"]
        return {e["reason"]: e["involvedObject"].get("fieldPath", "") for e in items}

    wait_for(
        "Created, Started and BackOff events",
        lambda: {"Created", "Started", "BackOff"} <= events().keys(),
    )
    # Container events point at the container, as upstream's do.
    assert {events()[r] for r in ("Created", "Started", "BackOff")} == {"spec.containers{main}"}

    def backing_off() -> bool:
        # The BackOff event is sent before the status manager's next patch lands.
        st = node.kubectl_json("get", "pod", "crasher", "-n", "default")["status"]
        c = st["containerStatuses"][0]
        waiting = c["state"].get("waiting", {})
        return bool(waiting.get("reason") == "CrashLoopBackOff" or c["restartCount"] >= 1)

    wait_for("CrashLoopBackOff or a restart in the pod's status", backing_off, 30.0)
    # kubectl logs goes through the API server to this kubelet's /containerLogs.
    logs = node.kubectl("logs", "crasher", "-n", "default", check=False)
    assert (logs.returncode, logs.stdout) == (0, "bye\n"), logs.stderr
    prev = node.kubectl("logs", "crasher", "-n", "default", "--previous", check=False)
    assert (prev.returncode, prev.stdout) == (0, "bye\n"), prev.stderr
    node.kubectl("delete", "pod", "crasher", "-n", "default", "--wait=false")


def test_readiness_gates_hold_ready_until_their_condition_is_true(node: KubeletProcess) -> None:
    """A pod with a readiness gate runs but is not Ready until someone (a load
    balancer controller, here kubectl) sets the gate's condition; then the
    kubelet writes Ready, and takes it back when the condition goes False."""
    gate = "example.com/lb-ready"
    node.create(pod_manifest("gated", {"app": "gated"}, "sleep 1000",
                               readinessGates=[{"conditionType": gate}]))  # fmt: skip

    def conditions() -> dict[str, dict[str, Any]]:
        p = node.kubectl_json("get", "pod", "gated", "-n", "default")
        if p["status"].get("phase") != "Running":
            return {}
        return {c["type"]: c for c in p["status"].get("conditions", [])}

    def ready_is(status: str) -> dict[str, dict[str, Any]] | None:
        c = conditions()
        return c if c.get("Ready", {}).get("status") == status else None

    c = wait_for("Running and not Ready", lambda: ready_is("False"))
    assert c["ContainersReady"]["status"] == "True"
    assert c["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert c["Ready"]["message"] == (
        f'corresponding condition of pod readiness gate "{gate}" does not exist.'
    )

    def set_gate(status: str) -> None:
        patch = {"status": {"conditions": [{"type": gate, "status": status}]}}
        node.kubectl("patch", "pod", "gated", "-n", "default", "--subresource=status",
                        "--type=strategic", "-p", json.dumps(patch))  # fmt: skip

    set_gate("True")
    c = wait_for("Ready once the gate is True", lambda: ready_is("True"), timeout=20)
    assert c[gate]["status"] == "True"  # the kubelet's writes keep the gate's condition
    set_gate("False")
    c = wait_for("not Ready once the gate is False", lambda: ready_is("False"), timeout=20)
    assert c["Ready"]["message"] == (
        f'the status of pod readiness gate "{gate}" is not "True", but False'
    )
    node.kubectl("delete", "pod", "gated", "-n", "default", "--wait=false")


def test_pod_that_does_not_fit_is_rejected_with_the_upstream_reason(node: KubeletProcess) -> None:
    big = pod_manifest("too-big", {"app": "too-big"}, "sleep 1000")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    node.create(big)

    def failed() -> dict[str, Any] | None:
        p = node.kubectl_json("get", "pod", "too-big", "-n", "default")
        return p if p["status"].get("phase") == "Failed" else None

    p = wait_for("the pod to be rejected", failed, timeout=30)
    assert p["status"]["reason"] == "OutOfcpu"
    assert p["status"]["message"].startswith(
        "Pod was rejected: Node didn't have enough resource: cpu"
    )
    node.kubectl("delete", "pod", "too-big", "-n", "default", "--wait=false")
    wait_for("the rejected pod to be deleted", lambda: not _pods(node, "app=too-big"))


def test_kubelet_port_checks_tokens_and_access_with_the_api_server(node: KubeletProcess) -> None:
    """TokenReview for bearer tokens, SubjectAccessReview on nodes/<subresource>."""
    import ssl
    import urllib.error
    import urllib.request

    cp = node.cp
    cp.kubectl("create", "serviceaccount", "reader", "-n", "default", check=False)
    cp.kubectl("create", "serviceaccount", "nobody", "-n", "default", check=False)
    cp.kubectl(
        "create", "clusterrole", "node-pods-reader",
        "--verb=get", "--resource=nodes/pods", check=False,
    )  # fmt: skip
    cp.kubectl(
        "create", "clusterrolebinding", "reader-node-pods",
        "--clusterrole=node-pods-reader", "--serviceaccount=default:reader", check=False,
    )  # fmt: skip
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def status(path: str, token: str | None) -> int:
        req = urllib.request.Request(f"https://127.0.0.1:{node.port}{path}")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    reader = cp.kubectl("create", "token", "reader", "-n", "default").stdout.strip()
    nobody = cp.kubectl("create", "token", "nobody", "-n", "default").stdout.strip()
    assert status("/pods", None) == 401  # anonymous is off
    assert status("/pods", "not-a-token") == 401
    assert status("/pods", nobody) == 403
    assert wait_for("RBAC to allow the reader", lambda: status("/pods", reader) == 200)
    # nodes/configz was not granted, nor nodes/proxy that it falls back to (fine-grained authz)
    assert status("/configz", reader) == 403
    cp.kubectl(
        "create", "clusterrole", "node-proxy", "--verb=get", "--resource=nodes/proxy", check=False
    )  # fmt: skip
    cp.kubectl(
        "create", "clusterrolebinding", "reader-node-proxy",
        "--clusterrole=node-proxy", "--serviceaccount=default:reader", check=False,
    )  # fmt: skip
    assert wait_for("the proxy fallback", lambda: status("/configz", reader) == 200)
