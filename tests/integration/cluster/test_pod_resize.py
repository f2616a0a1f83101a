"""In-place pod resize (InPlacePodVerticalScaling, beta and on in v1.34) on real
containers: our kubelet on a private containerd with pod cgroups under a cgroup
root of its own, the real kube-apiserver. Each resize goes through the pod's
`resize` subresource with kubectl, as a user sends it; the test reads the
container's and the pod's cgroup files and the pod's status:

- cpu and memory grown in place: the cgroups carry the new values, the status
  shows them (resources from the runtime, allocatedResources), no resize
  condition is left, the container was not restarted;
- more cpu than the node has: PodResizePending, Infeasible, upstream's message,
  the running container untouched;
- a memory limit below what the container uses: PodResizeInProgress with
  reason Error and upstream's message, the old limit kept; reverted, the
  condition leaves the API's copy of the status;
- resizePolicy RestartContainer for memory: the container restarts with the
  new limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.cm.cgroup_manager import CgroupManager
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess, cluster_kubelet
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import pod_manifest

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-resize-node"
CGROUP_ROOT = f"/kpy-resize-{os.getpid()}"
MI = 1024 * 1024


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("resize-kubelet")
    # The cgroup root must exist, as upstream requires; a private one keeps
    # this node's pods apart from any other kubelet's on the machine.
    cgroups = CgroupManager()
    cgroups.create(CGROUP_ROOT)
    # No static pod: everything under the cgroup root goes with the API's pods.
    k = cluster_kubelet(
        control_plane, tmp, containerd.endpoint, NODE,
        config={"cgroupsPerQOS": True, "cgroupRoot": CGROUP_ROOT},
    )  # fmt: skip
    try:
        wait_for("the Node to be Ready", k.ready, timeout=90)
        yield k
    finally:
        # Deleted while the kubelet runs, so it stops the containers and
        # removes the pod cgroups before the root goes.
        k.kubectl("delete", "pods", "-n", "default", "-l", "resize", "--timeout=60s", check=False)
        k.stop()
        print(f"kubelet log: {k.log}")
        if not cgroups.destroy(CGROUP_ROOT):
            print(f"cgroup root {CGROUP_ROOT} still busy")


def start(k: KubeletProcess, name: str, command: str, **container: Any) -> dict[str, Any]:
    p = pod_manifest(name, {"resize": name}, command)
    p["spec"].update(nodeName=NODE, terminationGracePeriodSeconds=1)
    p["spec"]["automountServiceAccountToken"] = False
    p["spec"]["containers"][0].update(container)
    k.create(p)
    wait_for(f"pod {name} running", lambda: phase(k, name) == "Running", timeout=120)
    return get(k, name)


def get(k: KubeletProcess, name: str) -> dict[str, Any]:
    return k.kubectl_json("get", "pod", name, "-n", "default")  # type: ignore[no-any-return]


def phase(k: KubeletProcess, name: str) -> str:
    return str(get(k, name)["status"].get("phase"))


def resize(k: KubeletProcess, name: str, resources: dict[str, Any], check: bool = True) -> None:
    patch = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    k.kubectl("patch", "pod", name, "-n", "default", "--subresource", "resize",
              "-p", json.dumps(patch), check=check)  # fmt: skip


def resize_conditions(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conds = p["status"].get("conditions") or []
    return {c["type"]: c for c in conds if c["type"].startswith("PodResize")}


def cgroup_dir(controller: str, p: dict[str, Any], container: bool) -> Path:
    qos = p["status"]["qosClass"].lower()
    d = Path("/sys/fs/cgroup", controller, CGROUP_ROOT.strip("/"), "kubepods")
    if qos != "guaranteed":
        d /= qos
    d /= f"pod{p['metadata']['uid']}"
    if container:
        cid = p["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        d /= cid
    return d


def read(controller: str, p: dict[str, Any], name: str, container: bool = True) -> int:
    return int((cgroup_dir(controller, p, container) / name).read_text())


def main_status(p: dict[str, Any]) -> dict[str, Any]:
    return p["status"]["containerStatuses"][0]  # type: ignore[no-any-return]


def test_cpu_and_memory_grow_in_place(node: KubeletProcess) -> None:
    k = node
    p = start(k, "grow", "sleep 100000", resources={
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    })  # fmt: skip
    assert read("cpu", p, "cpu.cfs_quota_us") == 20000
    assert read("memory", p, "memory.limit_in_bytes") == 64 * MI
    want = {"requests": {"cpu": "150m", "memory": "48Mi"},
            "limits": {"cpu": "300m", "memory": "96Mi"}}  # fmt: skip
    resize(k, "grow", want)

    def done() -> bool:
        q = get(k, "grow")
        return main_status(q).get("resources") == want and not resize_conditions(q)

    wait_for("the resize to show in the status", done, timeout=60,
             detail=lambda: json.dumps(get(k, "grow")["status"]))  # fmt: skip
    q = get(k, "grow")
    assert main_status(q)["allocatedResources"] == want["requests"]
    assert main_status(q)["restartCount"] == 0
    assert main_status(q)["containerID"] == main_status(p)["containerID"]
    # The container's cgroup and its pod's.
    assert read("cpu", q, "cpu.cfs_quota_us") == 30000
    assert read("cpu", q, "cpu.shares") == 153
    assert read("memory", q, "memory.limit_in_bytes") == 96 * MI
    assert read("cpu", q, "cpu.cfs_quota_us", container=False) == 30000
    assert read("memory", q, "memory.limit_in_bytes", container=False) == 96 * MI
    events = k.kubectl("get", "events", "-n", "default", "--field-selector",
                       "involvedObject.name=grow,reason=ResizeCompleted", "-o", "json").stdout  # fmt: skip
    assert "Pod resize completed" in events


def test_more_cpu_than_the_node_has_is_infeasible(node: KubeletProcess) -> None:
    k = node
    p = start(k, "huge", "sleep 100000", resources={
        "requests": {"cpu": "100m"}, "limits": {"cpu": "100m", "memory": "32Mi"},
    })  # fmt: skip
    resize(k, "huge", {"requests": {"cpu": "1000"}, "limits": {"cpu": "1000"}})

    def pending() -> dict[str, Any] | None:
        return resize_conditions(get(k, "huge")).get("PodResizePending")

    c = wait_for("PodResizePending", pending, timeout=60)
    assert c["reason"] == "Infeasible"
    assert c["message"].startswith(
        "Node didn't have enough capacity: cpu, requested: 1000000, capacity: "
    )
    assert c["observedGeneration"] == get(k, "huge")["metadata"]["generation"]
    q = get(k, "huge")
    assert read("cpu", q, "cpu.cfs_quota_us") == 10000  # untouched
    assert main_status(q)["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}
    assert p["status"]["containerStatuses"][0]["containerID"] == main_status(q)["containerID"]


def test_a_memory_limit_below_usage_is_refused(node: KubeletProcess) -> None:
    k = node
    # 40 MiB written to the container's tmpfs count as its memory.
    start(k, "full", "head -c 41943040 /dev/zero > /dev/shm/fill; sleep 100000", resources={
        "requests": {"memory": "16Mi"}, "limits": {"memory": "128Mi"},
    })  # fmt: skip
    wait_for(
        "the tmpfs to fill",
        lambda: read("memory", get(k, "full"), "memory.usage_in_bytes") > 40 * MI,
        timeout=60,
    )
    resize(k, "full", {"requests": {"memory": "16Mi"}, "limits": {"memory": "24Mi"}})

    def error() -> dict[str, Any] | None:
        c = resize_conditions(get(k, "full")).get("PodResizeInProgress")
        return c if c is not None and c.get("reason") == "Error" else None

    c = wait_for("PodResizeInProgress with an Error", error, timeout=60)
    # Both the pod's cgroup and the container's use more than 24Mi.
    assert c["message"].startswith(
        "cannot decrease memory limits: [attempting to set pod memory limit (25165824) "
        "below current usage ("
    )
    assert (
        'attempting to set container "main" memory limit (25165824) below current usage ('
        in (c["message"])
    )
    q = get(k, "full")
    assert read("memory", q, "memory.limit_in_bytes") == 128 * MI
    assert phase(k, "full") == "Running"
    # Back to what it runs with: the Error condition, already in the API's
    # copy, goes away (upstream's "decrease memory limit below usage" spec).
    resize(k, "full", {"requests": {"memory": "16Mi"}, "limits": {"memory": "128Mi"}})
    wait_for(
        "the resize conditions to go",
        lambda: not resize_conditions(get(k, "full")),
        timeout=60,
        detail=lambda: json.dumps(get(k, "full")["status"].get("conditions")),
    )


def test_restart_container_policy_restarts_it_with_the_new_limit(node: KubeletProcess) -> None:
    k = node
    p = start(k, "again", "sleep 100000",
              resources={"requests": {"memory": "32Mi"}, "limits": {"memory": "64Mi"}},
              resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}])  # fmt: skip
    resize(k, "again", {"requests": {"memory": "32Mi"}, "limits": {"memory": "80Mi"}})

    def restarted() -> bool:
        q = get(k, "again")
        s = main_status(q)
        return (
            s.get("restartCount") == 1
            and "running" in s.get("state", {})
            and (s.get("resources") or {}).get("limits", {}).get("memory") == "80Mi"
            and not resize_conditions(q)
        )

    wait_for("the container restarted with the new limit", restarted, timeout=90)
    q = get(k, "again")
    assert main_status(q)["containerID"] != main_status(p)["containerID"]
    assert read("memory", q, "memory.limit_in_bytes") == 80 * MI
