"""Exec credential provider plugins for real: our kubelet (a node identity
under the Node authorizer) on a private containerd, pulling from a local
docker-registry that wants htpasswd basic auth, with no pull secret anywhere:
the credentials come only from a real exec plugin (a small Go program the
test toolkit builds) named by --image-credential-provider-config and found in
--image-credential-provider-bin-dir.

One plugin answers for <registry>/plain and caches by registry; another, in
service-account mode, answers for <registry>/sa with a token of the pod's
service account for its audience and the account's required annotation. An
image no plugin matches is refused by the registry (401), and so is a pod
whose service account lacks the required annotation (its plugin never runs).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.testing import credplugin
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.parts import part_unavailable
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

NODE = "py-credplugin-node"
AUDIENCE = "registry.kubelet-py.test"
IDENTITY = "registry.kubelet-py.test/identity"


@pytest.fixture(scope="module")
def registry(request: pytest.FixtureRequest) -> Registry:
    """The htpasswd registry of the pull-secret tests (their fixture), with the
    test image under the repositories the plugins match (and one they do not)."""
    r: Registry = request.getfixturevalue("private_registry")
    tar = os.path.join(r.directory, "busybox.tar")
    for repo in ("plain/busybox", "sa/busybox", "nomatch/busybox"):
        r.push(tar, repo, "1.36")
    return r


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane,
    containerd: Containerd,
    registry: Registry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("credplugin-kubelet")
    bins = tmp / "plugins"
    try:
        for name in ("plain-plugin", "sa-plugin"):
            credplugin.install(str(bins), name)
    except credplugin.Unavailable as err:
        part_unavailable("test credential provider plugin", str(err))
    env = [{"name": "CREDPLUGIN_USER", "value": USER},
           {"name": "CREDPLUGIN_PASSWORD", "value": PASSWORD}]  # fmt: skip
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1",
        "kind": "CredentialProviderConfig",
        "providers": [
            {
                "name": "plain-plugin",
                "matchImages": [f"{registry.host}/plain"],
                "defaultCacheDuration": "1m",
                "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                "args": [
                    "--cache-key-type=Registry",
                    "--cache-duration=5m",
                    f"--log={tmp / 'plain.log'}",
                ],
                "env": env,
            },
            {
                "name": "sa-plugin",
                "matchImages": [f"{registry.host}/sa"],
                "defaultCacheDuration": "1m",
                "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                "args": ["--cache-key-type=Image", "--require-token", f"--log={tmp / 'sa.log'}"],
                "env": env,
                "tokenAttributes": {
                    "serviceAccountTokenAudience": AUDIENCE,
                    "cacheType": "ServiceAccount",
                    "requireServiceAccount": True,
                    "requiredServiceAccountAnnotationKeys": [IDENTITY],
                },
            },
        ],
    }
    cfg = tmp / "credential-providers.yaml"
    cfg.write_text(yaml.safe_dump(config))
    # What a cluster admin grants a node for a plugin's audience (the API
    # server's ServiceAccountNodeAudienceRestriction).
    (tmp / "kubelet").mkdir()
    k = start_node(
        control_plane, tmp / "kubelet", containerd.endpoint, NODE,
        config={"cgroupsPerQOS": False, "clusterDNS": ["10.0.0.10"]},
        flags=["--image-credential-provider-config", str(cfg),
               "--image-credential-provider-bin-dir", str(bins)],
    )  # fmt: skip
    try:
        k.apply(*_audience_rbac())
        wait_for("the Node to be Ready", lambda: _ready(k), timeout=90)
        yield k
    finally:
        k.cp.kubectl("delete", "pods", "-l", "app=credplugin", "--wait=false", check=False)
        k.cp.kubectl("delete", "serviceaccount", "registry-user", "no-identity", check=False)
        k.cp.kubectl("delete", "clusterrolebinding,clusterrole", "kpy-credplugin-audience",
                     check=False)  # fmt: skip
        k.stop()
        print(f"kubelet log: {k.log}")


def _audience_rbac() -> list[dict[str, Any]]:
    name = "kpy-credplugin-audience"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": [AUDIENCE],
                    "verbs": ["request-serviceaccounts-token-audience"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": f"system:node:{NODE}"}]},
    ]  # fmt: skip


def pod(name: str, image: str, **spec: Any) -> dict[str, Any]:
    p = pull_pod(NODE, name, image, **spec)
    p["metadata"]["labels"] = {"app": "credplugin"}
    return p


def _ready(k: KubeletProcess) -> bool:
    if k.proc.poll() is not None:
        raise RuntimeError(f"kubelet exited {k.proc.returncode}: {k.log.read_text()[-3000:]}")
    n = k.kubectl_json("get", "node", NODE)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])


def _requests(k: KubeletProcess, name: str) -> list[dict[str, Any]]:
    path = Path(k.dir).parent / f"{name}.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _running(k: KubeletProcess, name: str) -> bool:
    return get_pod(k, name)["status"].get("phase") == "Running"


def _jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


ALWAYS = {"container": {"imagePullPolicy": "Always"}}
# How the runtime words the registry's 401: containerd 1.6, then containerd 2.
NO_CREDENTIALS = ("401", "no basic auth credentials")


def _refused_for_credentials(k: KubeletProcess, name: str) -> bool:
    w = waiting(k, name)
    message = w.get("message", "")
    return w.get("reason") in ("ErrImagePull", "ImagePullBackOff") and any(
        text in message for text in NO_CREDENTIALS
    )


def test_pulls_succeed_only_with_the_plugins_credentials(
    node: KubeletProcess, registry: Registry
) -> None:
    image = f"{registry.host}/plain/busybox:1.36"
    served = registry.served_manifests("plain/busybox")
    node.apply(pod("plugin-a", image, **ALWAYS))
    wait_for("plugin-a Running", lambda: _running(node, "plugin-a"), timeout=90)
    assert registry.served_manifests("plain/busybox") > served
    reqs = _requests(node, "plain")
    assert [(r["apiVersion"], r["kind"], r["image"]) for r in reqs] == [
        ("credentialprovider.kubelet.k8s.io/v1", "CredentialProviderRequest",
         f"{registry.host}/plain/busybox"),
    ]  # fmt: skip
    assert "serviceAccountToken" not in reqs[0]
    # cacheKeyType Registry, 5 minutes: the next pull needs no plugin run.
    node.apply(pod("plugin-b", image, **ALWAYS))
    wait_for("plugin-b Running", lambda: _running(node, "plugin-b"), timeout=90)
    assert len(_requests(node, "plain")) == 1

    # No plugin matches: the registry refuses the pull.
    other = f"{registry.host}/nomatch/busybox:1.36"
    node.apply(pod("no-plugin", other, **ALWAYS))

    wait_for("no-plugin refused", lambda: _refused_for_credentials(node, "no-plugin"), timeout=60)
    assert ("Failed", "Error: ErrImagePull") in events(node, "no-plugin")


def test_service_account_mode_sends_a_bound_token_and_the_annotation(
    node: KubeletProcess, registry: Registry
) -> None:
    image = f"{registry.host}/sa/busybox:1.36"
    sa = {"apiVersion": "v1", "kind": "ServiceAccount"}
    node.apply(
        {**sa, "metadata": {"name": "registry-user", "namespace": "default",
                            "annotations": {IDENTITY: "team-a", "other.example/x": "ignored"}}},
        {**sa, "metadata": {"name": "no-identity", "namespace": "default"}},
    )  # fmt: skip
    node.apply(pod("sa-pod", image, serviceAccountName="registry-user", **ALWAYS))
    wait_for("sa-pod Running", lambda: _running(node, "sa-pod"), timeout=90)
    (req,) = _requests(node, "sa")
    assert req["image"] == f"{registry.host}/sa/busybox"
    assert req["serviceAccountAnnotations"] == {IDENTITY: "team-a"}
    claims = _jwt_claims(req["serviceAccountToken"])
    assert claims["aud"] == [AUDIENCE]
    assert claims["sub"] == "system:serviceaccount:default:registry-user"
    uid = get_pod(node, "sa-pod")["metadata"]["uid"]
    assert claims["kubernetes.io"]["pod"] == {"name": "sa-pod", "uid": uid}

    # The account lacks the required annotation: the plugin is not run, the
    # registry refuses the anonymous pull.
    node.apply(pod("sa-missing", image, serviceAccountName="no-identity", **ALWAYS))

    wait_for("sa-missing refused", lambda: _refused_for_credentials(node, "sa-missing"), timeout=60)
    assert len(_requests(node, "sa")) == 1
