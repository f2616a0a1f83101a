"""imagePullSecrets and runtimeClassName in the runtime manager, on the fake
CRI: credentials matched to the image's registry and tried in order, upstream's
reasons, messages and events for failures and back-off, a malformed or missing
secret, and the RuntimeClass handler passed to RunPodSandbox (a missing class
fails the sandbox and is retried). The real registry and API server versions
are tests/integration/cluster/test_pull_secrets_runtime_class.py."""

from __future__ import annotations

import base64
import json
from typing import Any

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kubelet_pods import PullSecretGetter
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_image import PullCredentials
from kubelet.objectcache import ObjectNotFoundError
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassNotFoundError
from tests.unit.core.helpers import RecordingRecorder, c, manager, pod, status

IMAGE = "reg.example.com:5000/team/app:1"


class AuthImageService(FakeImageService):
    """A registry that serves IMAGE only to user `u` with password `right`."""

    def __init__(self) -> None:
        super().__init__(["busybox:1.36"])
        self.auths: list[tuple[str, str] | None] = []

    async def pull_image(
        self,
        image: pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        self.auths.append((auth.username, auth.password) if auth else None)
        if image.image == IMAGE and (
            auth is None or (auth.username, auth.password) != ("u", "right")
        ):
            raise errors.CRIError("PullImage", f'failed to pull "{image.image}": 401 Unauthorized')
        return await super().pull_image(image, auth, sandbox_config)


class Secrets:
    """The secret cache's interface over a dict (the real one is exercised
    against the API server in the cluster test)."""

    def __init__(self, objs: dict[str, dict[str, Any]]) -> None:
        self.objs = objs

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.objs:
            raise ObjectNotFoundError("secret", namespace, name)
        return self.objs[name]


class RuntimeClasses:
    def __init__(self, handlers: dict[str, str]) -> None:
        self.handlers = handlers

    async def lookup_runtime_handler(self, name: str) -> str:
        if name not in self.handlers:
            raise RuntimeClassNotFoundError(name)
        return self.handlers[name]


def pull_secret(name: str, auths: dict[str, Any] | bytes) -> dict[str, Any]:
    raw = auths if isinstance(auths, bytes) else json.dumps({"auths": auths}).encode()
    return {
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(raw).decode()},
    }


def setup(tmp_path, secrets: dict[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
    rt, img, rec = FakeRuntimeService(), AuthImageService(), RecordingRecorder()
    m = manager(
        tmp_path,
        rt,
        img,
        recorder=rec,
        image_backoff=Backoff(10, 300),
        credentials=PullCredentials(PullSecretGetter(Secrets(secrets), rec)),
        runtime_classes=RuntimeClasses({"runc": "runc", "kata": "kata-qemu"}),
    )
    return m, rt, img, rec


async def test_matching_credentials_are_tried_in_order_until_one_works(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, rec = setup(
        tmp_path,
        {
            "wrong": pull_secret("wrong", {"reg.example.com:5000/team": {"username": "u", "password": "x"}}),
            "right": pull_secret("right", {"reg.example.com:5000": {"auth": base64.b64encode(b"u:right").decode()}}),
            "other": pull_secret("other", {"quay.io": {"username": "q", "password": "q"}}),
        },
    )  # fmt: skip
    p = pod(
        [c("app", IMAGE)],
        imagePullSecrets=[{"name": "wrong"}, {"name": "right"}, {"name": "other"}, {"name": ""}],
    )
    res = await m.sync_pod(p, await status(m, p))
    assert res.ok, res.errors
    # The longer key first; quay.io's credentials are not for this registry.
    assert img.auths == [("u", "x"), ("u", "right")]
    assert not [e for e in rec.events if e[1] == "Warning"]


async def test_without_credentials_errimagepull_then_imagepullbackoff(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, rec = setup(tmp_path, {})
    p = pod([c("app", IMAGE)], imagePullSecrets=[{"name": "absent"}])
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and img.auths == [None]  # pulled anonymously, as upstream
    uid = p["metadata"]["uid"]
    denied = f'failed to pull "{IMAGE}": 401 Unauthorized'
    assert m.waiting[uid]["app"] == ("ErrImagePull", denied)
    reasons = [(e[2], e[3]) for e in rec.events]
    assert (
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (absent); attempting to pull the image "
        "may not succeed.",
    ) in reasons
    assert ("Failed", f'Failed to pull image "{IMAGE}": {denied}') in reasons
    assert ("Failed", "Error: ErrImagePull") in reasons
    res = await m.sync_pod(p, await status(m, p))  # inside the 10 s back-off: no pull
    assert img.auths == [None] and res.retry_after is not None
    assert m.waiting[uid]["app"] == (
        "ImagePullBackOff",
        f'Back-off pulling image "{IMAGE}": ErrImagePull: {denied}',
    )
    assert ("Failed", "Error: ImagePullBackOff") in [(e[2], e[3]) for e in rec.events]


async def test_every_failed_credential_is_in_the_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, _ = setup(
        tmp_path,
        {"s": pull_secret("s", {"reg.example.com:5000": {"username": "u", "password": "x"},
                                "*.example.com:5000": {"username": "v", "password": "y"}})},
    )  # fmt: skip
    p = pod([c("app", IMAGE)], imagePullSecrets=[{"name": "s"}])
    await m.sync_pod(p, await status(m, p))
    assert img.auths == [("u", "x"), ("v", "y")]
    reason, msg = m.waiting[p["metadata"]["uid"]]["app"]
    denied = f'failed to pull "{IMAGE}": 401 Unauthorized'
    assert (reason, msg) == ("ErrImagePull", f"[{denied}, {denied}]")


async def test_a_malformed_pull_secret_fails_the_container_without_a_pull(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, rec = setup(tmp_path, {"bad": pull_secret("bad", b"{not json")})
    p = pod([c("app", IMAGE)], imagePullSecrets=[{"name": "bad"}])
    res = await m.sync_pod(p, await status(m, p))
    assert not res.ok and img.auths == []
    reason, msg = m.waiting[p["metadata"]["uid"]]["app"]
    assert reason == msg and msg.startswith("invalid JSON")
    assert ("Failed", f"Error: {msg}") in [(e[2], e[3]) for e in rec.events]


async def test_an_image_already_present_needs_no_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, _ = setup(tmp_path, {"bad": pull_secret("bad", b"{not json")})
    p = pod([c("app", "busybox:1.36")], imagePullSecrets=[{"name": "bad"}])
    assert (await m.sync_pod(p, await status(m, p))).ok and img.auths == []


async def test_an_invalid_image_name_is_invalidimagename(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, _, img, rec = setup(tmp_path, {})
    p = pod([c("app", "Team/App:1")])
    await m.sync_pod(p, await status(m, p))
    reason, msg = m.waiting[p["metadata"]["uid"]]["app"]
    assert reason == "InvalidImageName" and img.auths == []
    assert msg.startswith('Failed to apply default image tag "Team/App:1": ')
    assert ("InspectFailed", msg) in [(e[2], e[3]) for e in rec.events]


async def test_the_runtime_class_handler_goes_to_run_pod_sandbox(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, rt, _, rec = setup(tmp_path, {})
    p = pod([c("app")], runtimeClassName="kata")
    assert (await m.sync_pod(p, await status(m, p))).ok
    assert [args[1] for args in rt.called("run_pod_sandbox")] == ["kata-qemu"]
    assert not rt.called("run_pod_sandbox")[0][0].linux.HasField("overhead")
    q = pod([c("app")], runtimeClassName="missing")
    q["metadata"]["uid"] = "other"
    res = await m.sync_pod(q, await status(m, q))
    msg = 'Failed to create pod sandbox: runtimeclass.node.k8s.io "missing" not found'
    assert res.errors == [msg]
    assert ("FailedCreatePodSandBox", msg) in [(e[2], e[3]) for e in rec.events]
    assert len(rt.called("run_pod_sandbox")) == 1  # the runtime was not asked
    assert isinstance(m.runtime_classes, RuntimeClasses)
    m.runtime_classes.handlers["missing"] = "runc"  # created later: the next sync works
    assert (await m.sync_pod(q, await status(m, q))).ok
    assert rt.called("run_pod_sandbox")[-1][1] == "runc"


async def test_overhead_is_in_the_sandbox_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, rt, _, _ = setup(tmp_path, {})
    p = pod([c("app")], runtimeClassName="kata", overhead={"cpu": "250m", "memory": "120Mi"})
    assert (await m.sync_pod(p, await status(m, p))).ok
    o = rt.called("run_pod_sandbox")[0][0].linux.overhead
    assert (o.cpu_shares, o.cpu_period, o.cpu_quota) == (256, 100000, 25000)
    assert o.memory_limit_in_bytes == 120 << 20


async def test_the_nodes_docker_config_comes_after_the_pods_secrets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kubelet.credentialprovider.provider import NodeDockerKeyring

    root = tmp_path / "root"
    root.mkdir()
    (root / "config.json").write_text(
        json.dumps({"auths": {"reg.example.com:5000": {"username": "u", "password": "right"}}})
    )
    rt, img = FakeRuntimeService(), AuthImageService()
    secrets = {"s": pull_secret("s", {"reg.example.com:5000": {"username": "u", "password": "x"}})}
    m = manager(
        tmp_path,
        rt,
        img,
        credentials=PullCredentials(
            PullSecretGetter(Secrets(secrets)), node_keyring=NodeDockerKeyring(str(root))
        ),
    )
    p = pod([c("app", IMAGE)], imagePullSecrets=[{"name": "s"}])
    assert (await m.sync_pod(p, await status(m, p))).ok
    assert img.auths == [("u", "x"), ("u", "right")]


async def test_the_pods_resources_are_in_the_sandbox_config_without_the_overhead(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m, rt, _, _ = setup(tmp_path, {})
    app = c("app")
    app["resources"] = {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    side = c("side")
    side["resources"] = {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}
    p = pod([app, side], runtimeClassName="kata", overhead={"cpu": "250m", "memory": "120Mi"})
    assert (await m.sync_pod(p, await status(m, p))).ok
    r = rt.called("run_pod_sandbox")[0][0].linux.resources
    # 750m requested, 1.5 cores and 320Mi limited; the overhead goes apart.
    assert (r.cpu_shares, r.cpu_period, r.cpu_quota) == (768, 100000, 150000)
    assert r.memory_limit_in_bytes == 320 << 20
    assert rt.called("run_pod_sandbox")[0][0].linux.overhead.memory_limit_in_bytes == 120 << 20


def test_sandbox_resources_of_besteffort_and_pinned_pods() -> None:
    from kubelet.kuberuntime.kuberuntime_sandbox import sandbox_resources

    be = sandbox_resources(pod([c("app")]), no_quota=False)
    assert (be.cpu_shares, be.cpu_period, be.cpu_quota, be.memory_limit_in_bytes) == (
        2, 100000, 0, 0,
    )  # fmt: skip
    g = c("app")
    g["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    # A limit without a request: shares from the limit; pinned CPUs lift the quota.
    pinned = sandbox_resources(pod([g]), no_quota=True)
    assert (pinned.cpu_shares, pinned.cpu_quota, pinned.memory_limit_in_bytes) == (
        2048, -1, 1 << 30,
    )  # fmt: skip
