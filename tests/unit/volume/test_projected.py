"""The projected volume plugin: all sources merged, tokens from the token manager."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest

from kubelet.volume import VolumeError
from kubelet.volume.atomic_writer import DATA_DIR
from kubelet.volume.projected import ProjectedPlugin, fs_user_of
from tests.unit.volume.helpers import Env, kube_api_access, read


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "labels": {"a": "b"}},
        "spec": {"serviceAccountName": "builder", "containers": [{"name": "c"}], **spec},
    }


@pytest.fixture
def env() -> Env:
    return Env()


async def test_kube_api_access_volume(tmp_path: Any, env: Env) -> None:
    d = str(tmp_path / "kube-api-access")
    assert env.plugin.name == "kubernetes.io/projected" and env.plugin.requires_remount
    assert env.plugin.can_support(kube_api_access())
    await env.plugin.set_up(pod(), kube_api_access(), d)
    assert read(f"{d}/token") == "token-1"
    assert read(f"{d}/ca.crt") == "CA PEM"
    assert read(f"{d}/namespace") == "ns"
    for f in ("token", "ca.crt", "namespace"):
        assert stat.S_IMODE(os.stat(f"{d}/{f}").st_mode) == 0o644
    path, body = env.api.requests[0]
    assert path == "/api/v1/namespaces/ns/serviceaccounts/builder/token"
    assert body["spec"] == {
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-1"},
    }


async def test_token_refresh_reaches_the_file(tmp_path: Any, env: Env) -> None:
    d = str(tmp_path / "v")
    await env.plugin.set_up(pod(), kube_api_access(), d)
    data = os.readlink(f"{d}/{DATA_DIR}")
    env.clock.step(60)
    await env.plugin.set_up(pod(), kube_api_access(), d)  # remount: nothing changed
    assert os.readlink(f"{d}/{DATA_DIR}") == data and len(env.api.requests) == 1
    env.clock.step(0.8 * 3607)
    await env.plugin.set_up(pod(), kube_api_access(), d)
    assert read(f"{d}/token") == "token-2"
    assert os.readlink(f"{d}/{DATA_DIR}") != data


async def test_audience_and_token_modes(tmp_path: Any, env: Env) -> None:
    spec = {
        "name": "vault",
        "projected": {
            "defaultMode": 0o644,
            "sources": [{"serviceAccountToken": {"audience": "vault", "path": "vault/token"}}],
        },
    }
    await env.plugin.set_up(pod(), spec, str(tmp_path / "a"))
    assert env.api.requests[0][1]["spec"]["audiences"] == ["vault"]
    assert env.api.requests[0][1]["spec"]["expirationSeconds"] == 3600  # the API default
    assert stat.S_IMODE(os.stat(tmp_path / "a/vault/token").st_mode) == 0o644
    # One runAsUser for every container: the token is that user's, 0600.
    uid = os.getuid()
    p = pod(securityContext={"runAsUser": uid}, initContainers=[{"name": "i"}])
    await env.plugin.set_up(p, spec, str(tmp_path / "b"))
    st = os.stat(tmp_path / "b/vault/token")
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == uid
    # fsGroup: 0600 plus group read.
    p = pod(securityContext={"fsGroup": os.getgid()})
    await env.plugin.set_up(p, spec, str(tmp_path / "c"))
    assert stat.S_IMODE(os.stat(tmp_path / "c/vault/token").st_mode) == 0o640


def test_fs_user_of() -> None:
    assert fs_user_of(pod()) is None
    assert fs_user_of(pod(securityContext={"runAsUser": 5})) == 5
    assert (
        fs_user_of(
            pod(containers=[{"name": "a", "securityContext": {"runAsUser": 7}}, {"name": "b"}])
        )
        is None
    )
    assert (
        fs_user_of(
            pod(
                securityContext={"runAsUser": 5},
                containers=[{"name": "a", "securityContext": {"runAsUser": 7}}, {"name": "b"}],
            )
        )
        is None
    )
    assert (
        fs_user_of(
            pod(containers=[{"name": "a", "securityContext": {"runAsUser": 7}}], securityContext={})
        )
        == 7
    )


async def test_configmap_secret_items_and_optional(tmp_path: Any, env: Env) -> None:
    d = str(tmp_path / "v")
    spec = {
        "name": "all",
        "projected": {
            "defaultMode": 0o400,
            "sources": [
                {
                    "configMap": {
                        "name": "app",
                        "items": [{"key": "k", "path": "cfg/k", "mode": 0o640}],
                    }
                },
                {"secret": {"name": "s"}},
                {"secret": {"name": "missing", "optional": True}},
                {
                    "configMap": {
                        "name": "app",
                        "items": [{"key": "nokey", "path": "n"}],
                        "optional": True,
                    }
                },
            ],
        },
    }
    await env.plugin.set_up(pod(), spec, d)
    assert read(f"{d}/cfg/k") == "v" and read(f"{d}/pw") == "hunter2"
    assert stat.S_IMODE(os.stat(f"{d}/cfg/k").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(f"{d}/pw").st_mode) == 0o400
    assert sorted(n for n in os.listdir(d) if not n.startswith("..")) == ["cfg", "pw"]


async def test_errors_aggregate_across_sources(tmp_path: Any, env: Env) -> None:
    spec = {
        "name": "bad",
        "projected": {
            "sources": [
                {"configMap": {"name": "nope"}},
                {"secret": {"name": "s", "items": [{"key": "x", "path": "x"}]}},
                {"configMap": {"name": "app"}},
            ]
        },
    }
    with pytest.raises(
        VolumeError,
        match=r'^\[configmap "nope" not found, references non-existent secret key: x\]$',
    ):
        await env.plugin.set_up(pod(), spec, str(tmp_path / "v"))
    assert not os.path.exists(tmp_path / "v")


async def test_cluster_trust_bundle_not_supported(tmp_path: Any, env: Env) -> None:
    spec = {
        "name": "ctb",
        "projected": {
            "sources": [{"clusterTrustBundle": {"name": "b", "path": "ca.pem"}}],
        },
    }
    with pytest.raises(VolumeError, match=r"clusterTrustBundle .* not supported"):
        await env.plugin.set_up(pod(), spec, str(tmp_path / "v"))


async def test_token_failure_and_standalone(tmp_path: Any, env: Env) -> None:
    from kubelet.client.rest import APIError

    env.api.fail = APIError(404, "NotFound", 'serviceaccounts "builder" not found')
    with pytest.raises(
        VolumeError, match=r'^failed to fetch token: 404 NotFound: serviceaccounts "builder"'
    ):
        await env.plugin.set_up(pod(), kube_api_access(), str(tmp_path / "v"))
    standalone = ProjectedPlugin(env.configmaps, env.secrets, None)
    with pytest.raises(
        VolumeError,
        match=r"^cannot setup projected volume kube-api-access-x1 because kube client is not configured$",
    ):
        await standalone.set_up(pod(), kube_api_access(), str(tmp_path / "v"))


async def test_tear_down_drops_the_pods_tokens(tmp_path: Any, env: Env) -> None:
    d = str(tmp_path / "v")
    await env.plugin.set_up(pod(), kube_api_access(), d)
    assert len(env.tokens) == 1
    await env.plugin.tear_down("uid-1", "kube-api-access-x1", d)
    assert len(env.tokens) == 0 and not os.path.exists(d)


def test_plugins_satisfy_the_protocols() -> None:
    """Checked by mypy: the plugins are VolumePlugins, the manager a PodObjectManager."""
    from kubelet.objectcache import CONFIGMAP, PodObjectManager, WatchingObjectManager
    from kubelet.volume import VolumePlugin
    from kubelet.volume.configmap import ConfigMapPlugin
    from kubelet.volume.downwardapi import DownwardAPIPlugin
    from kubelet.volume.secret import SecretPlugin

    objects: PodObjectManager = WatchingObjectManager(CONFIGMAP, None)
    plugins: list[VolumePlugin] = [
        ConfigMapPlugin(objects),
        SecretPlugin(objects),
        DownwardAPIPlugin(),
        ProjectedPlugin(objects, objects, None),
    ]
    assert len({p.name for p in plugins}) == 4
    assert all(p.requires_remount for p in plugins)
