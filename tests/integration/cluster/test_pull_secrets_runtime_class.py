"""imagePullSecrets and RuntimeClasses for real: our kubelet (a node identity
under the Node authorizer) on a private containerd, pulling from a local
docker-registry that wants htpasswd basic auth. The pod's dockerconfigjson
secret is read through the kubelet's secret cache and its credentials go to
PullImage; without it, or with a wrong password, the pod shows ErrImagePull
then ImagePullBackOff. A RuntimeClass's handler reaches RunPodSandbox (an
unknown one fails with containerd's words in the event), its overhead sizes
the pod cgroup, and a static pod naming a RuntimeClass that does not exist yet
fails its sandbox until the class is created."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.registry import Registry
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import start_node
from tests.integration.cluster.pull_secrets import (
    PASSWORD,
    USER,
    events,
    get_pod,
    pull_pod,
    waiting,
)

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-pull-node"


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane,
    containerd: Containerd,
    private_registry: Registry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("pull-kubelet")
    k = start_node(
        control_plane,
        tmp,
        containerd.endpoint,
        node_name=NODE,
        config={"cgroupsPerQOS": True},
    )
    try:
        wait_for("the Node to be Ready", k.ready, timeout=90)
        yield k
    finally:
        k.kubectl("delete", "pods", "-l", "app=pull", "--wait=false", check=False)
        k.kubectl("delete", "runtimeclass", "rc-runc", "rc-nope", "rc-late", check=False)
        k.stop()
        print(f"kubelet log: {k.log}")


def docker_secret(name: str, host: str, password: str) -> dict[str, Any]:
    cfg = {"auths": {host: {"username": USER, "password": password}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(cfg).encode()).decode()},
    }


def test_a_pull_secret_lets_the_pod_pull_and_without_it_the_pull_backs_off(
    node: KubeletProcess, private_registry: Registry
) -> None:
    host = private_registry.host
    image = f"{host}/kubelet-py/busybox:1.36"
    node.apply(
        docker_secret("regcred", host, PASSWORD),
        docker_secret("wrongcred", host, "not-the-password"),
    )
    served = private_registry.served_manifests("kubelet-py/busybox")
    refused = private_registry.auth_failures(USER)
    always = {"container": {"imagePullPolicy": "Always"}}
    node.apply(
        pull_pod(NODE, "with-secret", image, imagePullSecrets=[{"name": "regcred"}], **always),
        pull_pod(NODE, "no-secret", image, **always),
        pull_pod(NODE, "wrong-secret", image, imagePullSecrets=[{"name": "wrongcred"}], **always),
    )
    wait_for(
        "with-secret Running",
        lambda: get_pod(node, "with-secret")["status"].get("phase") == "Running",
        timeout=60,
    )
    # The secret's credentials reached the registry through containerd.
    assert private_registry.served_manifests("kubelet-py/busybox") > served
    for name in ("no-secret", "wrong-secret"):
        seen: dict[str, str] = {}

        def both(name: str = name, seen: dict[str, str] = seen) -> bool:
            w = waiting(node, name)
            if w.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
                seen[w["reason"]] = w.get("message", "")
            return len(seen) == 2

        wait_for(f"{name}: ErrImagePull and ImagePullBackOff", both, timeout=45)
        # containerd's answer to a 401 (1.6 names the status, 2 what failed),
        # then the back-off naming it.
        assert any(t in seen["ErrImagePull"] for t in ("401 Unauthorized", "authorization failed"))
        assert seen["ImagePullBackOff"].startswith(
            f'Back-off pulling image "{image}": ErrImagePull: '
        )
        reasons = events(node, name)
        assert ("Failed", "Error: ErrImagePull") in reasons
        assert any(
            r == "Failed" and m.startswith(f'Failed to pull image "{image}": ') for r, m in reasons
        )
        assert get_pod(node, name)["status"]["phase"] == "Pending"
    # The wrong secret's password was sent (and refused), not an anonymous pull.
    assert private_registry.auth_failures(USER) > refused


def test_a_missing_pull_secret_is_named_and_the_pull_goes_on_without_it(
    node: KubeletProcess,
) -> None:
    # The image is on the node (IfNotPresent): only the warning tells of the secret.
    node.apply(
        pull_pod(NODE, "absent-secret", "busybox:1.36", imagePullSecrets=[{"name": "nosuch"}])
    )
    wait_for(
        "absent-secret Running",
        lambda: get_pod(node, "absent-secret")["status"].get("phase") == "Running",
        timeout=60,
    )
    assert (
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (nosuch); attempting to pull the image "
        "may not succeed.",
    ) in events(node, "absent-secret")


def _sandbox_handlers(endpoint: str, pod_uid: str) -> list[str]:
    async def ask() -> list[str]:
        rt = RemoteRuntimeService(endpoint, 10)
        try:
            sbs = await rt.list_pod_sandbox(
                pb.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": pod_uid})
            )
            return [s.runtime_handler for s in sbs]
        finally:
            await rt.close()

    return asyncio.run(ask())


def _cgroup(ctrl: str, rel: str, name: str) -> str:
    v1 = f"/sys/fs/cgroup/{ctrl}/{rel}/{name}"
    return (
        Path(v1 if os.path.isdir("/sys/fs/cgroup/memory") else f"/sys/fs/cgroup/{rel}/{name}")
        .read_text()
        .strip()
    )


def test_runtime_class_handler_and_overhead(node: KubeletProcess, containerd: Containerd) -> None:
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"}
    node.apply(
        {**rc, "metadata": {"name": "rc-runc"}, "handler": "runc",
         "overhead": {"podFixed": {"cpu": "250m", "memory": "32Mi"}}},
        {**rc, "metadata": {"name": "rc-nope"}, "handler": "no-such-handler"},
    )  # fmt: skip
    limits = {"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}
    node.apply(
        pull_pod(NODE, "rc-ok", "busybox:1.36", runtimeClassName="rc-runc", container=limits),
        pull_pod(NODE, "rc-plain", "busybox:1.36", container=limits),
        pull_pod(NODE, "rc-bad", "busybox:1.36", runtimeClassName="rc-nope"),
    )
    for name in ("rc-ok", "rc-plain"):
        wait_for(
            f"{name} Running",
            lambda n=name: get_pod(node, n)["status"].get("phase") == "Running",
            timeout=60,
        )
    ok = get_pod(node, "rc-ok")
    # The RuntimeClass admission plugin copied the overhead into the pod.
    assert ok["spec"]["overhead"] == {"cpu": "250m", "memory": "32Mi"}
    assert _sandbox_handlers(containerd.endpoint, ok["metadata"]["uid"]) == ["runc"]
    # Guaranteed pods: kubepods/pod<uid>. Limits plus overhead against limits alone.
    for name, quota, mem in (("rc-ok", 75000, 96 << 20), ("rc-plain", 50000, 64 << 20)):
        rel = f"kubepods/pod{get_pod(node, name)['metadata']['uid']}"
        if os.path.isdir("/sys/fs/cgroup/memory"):
            assert int(_cgroup("cpu", rel, "cpu.cfs_quota_us")) == quota
            assert int(_cgroup("memory", rel, "memory.limit_in_bytes")) == mem
        else:
            assert _cgroup("", rel, "cpu.max") == f"{quota} 100000"
            assert int(_cgroup("", rel, "memory.max")) == mem

    def bad_event() -> list[str]:
        return [m for r, m in events(node, "rc-bad") if r == "FailedCreatePodSandBox"]

    msgs = wait_for("rc-bad FailedCreatePodSandBox", bad_event, timeout=45)
    assert msgs[0].startswith("Failed to create pod sandbox: ") and "no-such-handler" in msgs[0]
    assert get_pod(node, "rc-bad")["status"]["phase"] == "Pending"


def test_a_static_pod_waits_for_its_runtime_class(node: KubeletProcess) -> None:
    """The API refuses a pod naming a RuntimeClass that does not exist; a static
    pod is not asked, so the kubelet's own lookup is what stops it."""
    manifest = pull_pod(NODE, "late-rc", "busybox:1.36", runtimeClassName="rc-late")
    manifest["metadata"].pop("namespace")
    manifest["spec"].pop("nodeName")
    (node.manifests / "late-rc.yaml").write_text(yaml.safe_dump(manifest))
    full = f"late-rc-{NODE}"
    want = 'Failed to create pod sandbox: runtimeclass.node.k8s.io "rc-late" not found'
    wait_for(
        "the not-found event",
        lambda: ("FailedCreatePodSandBox", want) in events(node, full),
        timeout=45,
    )
    node.apply(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
         "metadata": {"name": "rc-late"}, "handler": "runc"},
    )  # fmt: skip

    def running() -> bool:
        return get_pod(node, full)["status"].get("phase") == "Running"

    # Once the class exists the mirror pod is admitted and the next sync runs it.
    wait_for("late-rc Running", running, timeout=60)
    (node.manifests / "late-rc.yaml").unlink()
