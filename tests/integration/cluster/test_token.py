"""Service-account tokens against the real API server: the node asks for a
token bound to one of its pods, with its own credentials, and TokenReview
takes it as the service account with the pod in `extra`. The projected
kube-api-access volume is built the same way, its CA from the
kube-root-ca.crt configMap through the node's watch-based object cache."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient
from kubelet.objectcache import CONFIGMAP, SECRET, WatchingObjectManager
from kubelet.testing.controlplane import ControlPlane
from kubelet.token import BoundObjectRef, TokenManager, TokenRequestSpec
from kubelet.volume import VolumeError
from kubelet.volume.projected import ProjectedPlugin

pytestmark = pytest.mark.cluster

NODE = "py-node-token"
NS = "default"
SA = "token-sa"

T = TypeVar("T")


async def retry(fn: Callable[[], Awaitable[T]], timeout: float = 20.0) -> T:
    """The Node authorizer learns of a new pod from its own informers: the
    first requests for that pod's objects may be refused for a moment."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await fn()
        except (RuntimeError, VolumeError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.3)


def create(cp: ControlPlane, obj: dict[str, Any]) -> None:
    import subprocess

    from kubelet.testing.controlplane import find_binaries

    subprocess.run(
        [find_binaries()["kubectl"], f"--kubeconfig={cp.admin_kubeconfig}", "create", "-f", "-"],
        input=json.dumps(obj),
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )


def pod_manifest(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "serviceAccountName": SA,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


@pytest.fixture(scope="module")
def bound_pod(control_plane: ControlPlane) -> dict[str, Any]:
    cp = control_plane
    cp.kubectl("create", "serviceaccount", SA, "-n", NS, check=False)
    # The controller-manager's root-CA publisher puts the cluster CA in every namespace.
    with open(cp.pki.ca.cert) as fh:
        ca = fh.read()
    deadline = time.monotonic() + 60
    while cp.kubectl("get", "configmap", "kube-root-ca.crt", "-n", NS, check=False).returncode:
        assert time.monotonic() < deadline, "kube-root-ca.crt was never published"
        time.sleep(0.5)
    cp.kubectl("delete", "pod", "token-pod", "token-elsewhere", "-n", NS, "--ignore-not-found")
    create(cp, pod_manifest("token-pod", NODE))
    create(cp, pod_manifest("token-elsewhere", "some-other-node"))
    out = cp.kubectl("get", "pod", "token-pod", "-n", NS, "-o", "json").stdout
    pod: dict[str, Any] = json.loads(out)
    pod["_ca"] = ca
    return pod


async def token_review(cp: ControlPlane, token: str) -> dict[str, Any]:
    admin = APIClient(load_kubeconfig(cp.admin_kubeconfig), qps=50, burst=100)
    try:
        review = await admin.create(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
    finally:
        await admin.close()
    status: dict[str, Any] = review["status"]
    return status


async def test_node_token_for_its_pod_authenticates(
    control_plane: ControlPlane, bound_pod: dict[str, Any]
) -> None:
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(NODE)), qps=50, burst=100)
    tokens = TokenManager(client)
    md = bound_pod["metadata"]
    spec = TokenRequestSpec(
        expiration_seconds=3600, bound_object_ref=BoundObjectRef(md["name"], md["uid"])
    )
    try:
        tok = await retry(lambda: tokens.get_service_account_token(NS, SA, spec))
        # Cached: a second read asks nothing.
        requests = tokens.requests
        assert await tokens.get_service_account_token(NS, SA, spec) is tok
        assert tokens.requests == requests
        assert tok.expiration_seconds is not None and tok.expiration_seconds >= 3600
        assert not tokens.requires_refresh(tok)

        status = await token_review(control_plane, tok.token)
        assert status.get("authenticated") is True, status
        user = status["user"]
        assert user["username"] == f"system:serviceaccount:{NS}:{SA}"
        assert "system:serviceaccounts" in user["groups"]
        extra = user.get("extra") or {}
        assert extra["authentication.kubernetes.io/pod-name"] == [md["name"]]
        assert extra["authentication.kubernetes.io/pod-uid"] == [md["uid"]]

        # NodeRestriction: a pod bound elsewhere gets no token from this node.
        other = json.loads(
            control_plane.kubectl("get", "pod", "token-elsewhere", "-n", NS, "-o", "json").stdout
        )
        refused = TokenRequestSpec(
            expiration_seconds=3600,
            bound_object_ref=BoundObjectRef("token-elsewhere", other["metadata"]["uid"]),
        )
        with pytest.raises(RuntimeError, match=r"^failed to fetch token: 403"):
            await tokens.get_service_account_token(NS, SA, refused)
    finally:
        await client.close()


async def test_kube_api_access_volume(
    control_plane: ControlPlane, bound_pod: dict[str, Any], tmp_path: Any
) -> None:
    """The projected volume every admitted pod carries, set up by the plugin
    with the node's credentials."""
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(NODE)), qps=50, burst=100)
    configmaps = WatchingObjectManager(CONFIGMAP, client)
    secrets = WatchingObjectManager(SECRET, client)
    plugin = ProjectedPlugin(configmaps, secrets, TokenManager(client))
    volume = next(v for v in bound_pod["spec"]["volumes"] if v.get("projected"))
    assert volume["name"].startswith("kube-api-access-")
    d = str(tmp_path / volume["name"])
    try:
        configmaps.register_pod(bound_pod)
        secrets.register_pod(bound_pod)
        assert configmaps.watches == 1 and secrets.watches == 0
        await retry(lambda: plugin.set_up(bound_pod, volume, d))
        with open(os.path.join(d, "ca.crt")) as fh:
            assert fh.read() == bound_pod["_ca"]
        with open(os.path.join(d, "namespace")) as fh:
            assert fh.read() == NS
        with open(os.path.join(d, "token")) as fh:
            token = fh.read()
        status = await token_review(control_plane, token)
        assert status.get("authenticated") is True, status
        assert status["user"]["username"] == f"system:serviceaccount:{NS}:{SA}"
        assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [
            bound_pod["metadata"]["uid"]
        ]
        # Remount with nothing changed: the same version stays published.
        data = os.readlink(os.path.join(d, "..data"))
        await plugin.set_up(bound_pod, volume, d)
        assert os.readlink(os.path.join(d, "..data")) == data
        await plugin.tear_down(bound_pod["metadata"]["uid"], volume["name"], d)
        assert not os.path.exists(d)
    finally:
        configmaps.unregister_pod(bound_pod)
        secrets.unregister_pod(bound_pod)
        await configmaps.close()
        await secrets.close()
        await client.close()
