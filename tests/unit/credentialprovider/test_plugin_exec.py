"""Exec credential provider plugins: the request on stdin and the response on
stdout (real processes), failures with upstream's messages, the cache by
cacheKeyType and duration, one run for many concurrent pulls, and
service-account mode (token, annotations, the cache key)."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubelet.credentialprovider.config import DockerConfigEntry
from kubelet.credentialprovider.plugin import plugin as p
from kubelet.credentialprovider.plugin.config import API_V1, CredentialProvider
from kubelet.credentialprovider.plugin.plugins import LoadedPlugins, PluginKeyring

V1BETA1 = "credentialprovider.kubelet.k8s.io/v1beta1"


def script(tmp: Path, name: str, body: str) -> ExecDir:
    path = tmp / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    os.chmod(path, 0o755)
    return ExecDir(str(tmp), name)


class ExecDir:
    def __init__(self, bin_dir: str, name: str) -> None:
        self.bin_dir, self.name = bin_dir, name

    def plugin(self, api: str = API_V1, **kw: Any) -> p.ExecPlugin:
        return p.ExecPlugin(self.name, api, self.bin_dir, **kw)


RESPOND = """\
cat > "$0.request"
printf '{"apiVersion":"%s","kind":"CredentialProviderResponse","cacheKeyType":"%s"%s,"auth":{"reg.io":{"username":"u","password":"%s"}}}' \\
  "${API:-credentialprovider.kubelet.k8s.io/v1}" "${KEY:-Image}" "${DUR}" "${PASS:-pw}"
"""


async def test_request_on_stdin_response_on_stdout(tmp_path: Path) -> None:
    d = script(tmp_path, "good", RESPOND)
    plugin = d.plugin(args=("--flag",), env=(("PASS", "from-config-env"),))
    resp = await plugin.run("reg.io/team/app", "tok", {"example.com/k": "v"})
    assert resp == p.Response("Image", None, {"reg.io": ("u", "from-config-env")})
    req = json.loads((tmp_path / "good.request").read_text())
    assert req == {
        "kind": "CredentialProviderRequest", "apiVersion": API_V1, "image": "reg.io/team/app",
        "serviceAccountToken": "tok", "serviceAccountAnnotations": {"example.com/k": "v"},
    }  # fmt: skip
    # Older versions have no service-account fields.
    old = d.plugin(V1BETA1, env=(("API", V1BETA1),))
    await old.run("reg.io/app", "tok", {"a": "b"})
    assert json.loads((tmp_path / "good.request").read_text()) == {
        "kind": "CredentialProviderRequest", "apiVersion": V1BETA1, "image": "reg.io/app",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            "echo oops >&2; exit 3",
            "error execing credential provider plugin bad for image reg.io/x: exit status 3: oops",
        ),
        (
            'echo \'{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}\'',
            "apiVersion from credential plugin response did not match expected apiVersion:"
            "credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
        ),
        (
            'echo \'{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","extra":1}\'',
            "error decoding credential provider plugin response from stdout",
        ),
        (
            'echo \'{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"Something","cacheKeyType":"Image"}\'',
            "error decoding credential provider plugin response from stdout",
        ),
        ("echo not-json", "error reading GVK from response"),
        ("head -c 5000000 /dev/zero", "plugin output larger than"),
    ],
)
async def test_failures_say_why(tmp_path: Path, body: str, why: str) -> None:
    plugin = script(tmp_path, "bad", body).plugin()
    with pytest.raises(p.PluginError) as err:
        await plugin.run("reg.io/x", "", {})
    assert why in str(err.value)


async def test_a_plugin_that_hangs_is_killed_at_the_timeout(tmp_path: Path) -> None:
    plugin = script(tmp_path, "slow", "exec sleep 30").plugin(timeout=0.5)
    with pytest.raises(p.PluginError, match="context deadline exceeded"):
        await asyncio.wait_for(plugin.run("reg.io/x", "", {}), 10)


class FakeRun:
    """An ExecPlugin stand-in that counts runs; answers are scripted."""

    def __init__(self, resp: p.Response, delay: float = 0.0) -> None:
        self.resp, self.delay, self.calls = resp, delay, []

    async def run(self, image: str, token: str, annotations: dict[str, str]) -> p.Response:
        self.calls.append((image, token, dict(annotations)))
        await asyncio.sleep(self.delay)
        return self.resp


def provider(
    match: tuple[str, ...] = ("*.io",), default: float = 60.0, **kw: Any
) -> CredentialProvider:
    return CredentialProvider("x", match, default, API_V1, **kw)


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(resp: p.Response, sa: p.ServiceAccountMode | None = None, accounts: Any = None,
         default: float = 60.0) -> tuple[p.PluginProvider, FakeRun, Clock]:  # fmt: skip
    run, clock = FakeRun(resp), Clock()
    prov = p.PluginProvider(provider(default=default), run, sa, accounts, clock)  # type: ignore[arg-type]
    return prov, run, clock


async def test_cache_by_key_type_and_duration() -> None:
    # Registry: one run serves every image of that registry until it expires.
    prov, run, clock = make(p.Response("Registry", 30.0, {"reg.io": ("u", "p")}))
    cfg, _ = await prov.provide("reg.io/a", None)
    assert cfg == {"reg.io": DockerConfigEntry("u", "p")}
    await prov.provide("reg.io/b", None)
    assert len(run.calls) == 1
    await prov.provide("other.io/a", None)
    assert len(run.calls) == 2
    clock.t += 31
    await prov.provide("reg.io/a", None)
    assert len(run.calls) == 3
    # Image: per image. Global: one for all. Duration 0: never cached.
    prov, run, _ = make(p.Response("Image", None, {}))
    for image in ("reg.io/a", "reg.io/a", "reg.io/b"):
        await prov.provide(image, None)
    assert [c[0] for c in run.calls] == ["reg.io/a", "reg.io/b"]
    prov, run, _ = make(p.Response("Global", None, {}))
    for image in ("reg.io/a", "x.io/b"):
        await prov.provide(image, None)
    assert len(run.calls) == 1
    prov, run, _ = make(p.Response("Global", 0.0, {}))
    for image in ("reg.io/a", "reg.io/a"):
        await prov.provide(image, None)
    assert len(run.calls) == 2
    # No cacheDuration and defaultCacheDuration 0: not cached either.
    prov, run, _ = make(p.Response("Global", None, {}), default=0.0)
    for image in ("reg.io/a", "reg.io/a"):
        await prov.provide(image, None)
    assert len(run.calls) == 2


async def test_an_invalid_cache_key_type_gives_no_credentials() -> None:
    prov, _run, _ = make(p.Response("Forever", None, {"reg.io": ("u", "p")}))
    assert await prov.provide("reg.io/a", None) == ({}, None)


async def test_images_the_plugin_does_not_match_never_run_it() -> None:
    run = FakeRun(p.Response("Image", None, {}))
    prov = p.PluginProvider(provider(("reg.io:5000/team",)), run, None, None)  # type: ignore[arg-type]
    for image in ("reg.io/team/a", "reg.io:5000/other/a", "x.reg.io:5000/team/a"):
        assert await prov.provide(image, None) == ({}, None)
    await prov.provide("reg.io:5000/team/a", None)
    assert len(run.calls) == 1


async def test_concurrent_pulls_share_one_run() -> None:
    run = FakeRun(p.Response("Image", 0.0, {"reg.io": ("u", "p")}), delay=0.05)
    prov = p.PluginProvider(provider(), run, None, None)  # type: ignore[arg-type]
    answers = await asyncio.gather(*(prov.provide("reg.io/a", None) for _ in range(20)))
    assert len(run.calls) == 1 and all(
        a[0] == {"reg.io": DockerConfigEntry("u", "p")} for a in answers
    )


class Accounts:
    def __init__(self, annotations: dict[str, str], uid: str = "sa-uid") -> None:
        self.annotations, self.uid, self.tokens = annotations, uid, 0

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace, "uid": self.uid,
                             "annotations": self.annotations}}  # fmt: skip

    async def token(self, pod: p.PodIdentity, audience: str) -> str:
        self.tokens += 1
        return f"token-for-{pod.name}-{audience}-{self.tokens}"


def sa_mode(cache_type: str = "ServiceAccount", require: bool = True) -> p.ServiceAccountMode:
    return p.ServiceAccountMode(
        "registry.io", require, ("example.com/id",), ("example.com/opt",), cache_type
    )


POD_A = p.PodIdentity("ns", "pod-a", "uid-a", "builder")
POD_B = p.PodIdentity("ns", "pod-b", "uid-b", "builder")


async def test_service_account_mode_sends_token_and_annotations() -> None:
    accounts = Accounts({"example.com/id": "42", "example.com/opt": "o", "other": "x"})
    prov, run, _ = make(p.Response("Registry", 60.0, {"reg.io": ("u", "p")}), sa_mode(), accounts)
    cfg, ref = await prov.provide("reg.io/a", POD_A)
    assert cfg and ref == p.ServiceAccountRef("sa-uid", "ns", "builder")
    assert run.calls == [("reg.io/a", "token-for-pod-a-registry.io-1",
                          {"example.com/id": "42", "example.com/opt": "o"})]  # fmt: skip
    # cacheType ServiceAccount: another pod of the same account uses the cache.
    await prov.provide("reg.io/a", POD_B)
    assert len(run.calls) == 1
    # ... but not another account's pods, nor a changed annotation.
    await prov.provide("reg.io/a", p.PodIdentity("ns", "pod-c", "uid-c", "other-sa"))
    accounts.annotations["example.com/id"] = "43"
    await prov.provide("reg.io/a", POD_A)
    assert len(run.calls) == 3


async def test_token_cache_type_caches_per_token() -> None:
    accounts = Accounts({"example.com/id": "42"})
    prov, run, _ = make(
        p.Response("Registry", 60.0, {"reg.io": ("u", "p")}), sa_mode("Token"), accounts
    )
    await prov.provide("reg.io/a", POD_A)
    await prov.provide("reg.io/a", POD_B)  # a new token: a new entry
    assert len(run.calls) == 2


async def test_service_account_mode_refusals() -> None:
    # No service account but one is required: the plugin is not run.
    prov, run, _ = make(p.Response("Image", None, {}), sa_mode(), Accounts({"example.com/id": "1"}))
    assert await prov.provide("reg.io/a", p.PodIdentity("ns", "p", "u", "")) == ({}, None)
    # A required annotation missing: not run either.
    prov, run, _ = make(p.Response("Image", None, {}), sa_mode(), Accounts({}))
    assert await prov.provide("reg.io/a", POD_A) == ({}, None)
    assert run.calls == []
    # Not required: run without a token.
    prov, run, _ = make(p.Response("Image", None, {}), sa_mode(require=False), Accounts({}))
    await prov.provide("reg.io/a", p.PodIdentity("ns", "p", "u", ""))
    assert run.calls == [("reg.io/a", "", {})]


async def test_the_token_as_password_is_refused_unless_cached_per_token() -> None:
    class Echo(FakeRun):
        async def run(self, image: str, token: str, annotations: dict[str, str]) -> p.Response:
            self.calls.append((image, token, annotations))
            return p.Response("Image", 0.0, {"reg.io": ("sa", token)})

    accounts = Accounts({"example.com/id": "1"})
    prov = p.PluginProvider(provider(), Echo(p.Response("", None, {})), sa_mode(), accounts)  # type: ignore[arg-type]
    assert await prov.provide("reg.io/a", POD_A) == ({}, None)
    prov = p.PluginProvider(provider(), Echo(p.Response("", None, {})), sa_mode("Token"), accounts)  # type: ignore[arg-type]
    cfg, _ = await prov.provide("reg.io/a", POD_A)
    assert cfg["reg.io"].password.startswith("token-for-pod-a")


async def test_the_keyring_unions_plugins_in_order(tmp_path: Path) -> None:
    d1 = script(tmp_path, "one", RESPOND)
    d2 = script(tmp_path, "two", RESPOND.replace('"u"', '"u2"'))
    loaded = LoadedPlugins(
        (
            CredentialProvider("one", ("reg.io",), 60.0, API_V1, env=(("PASS", "p1"),)),
            CredentialProvider("two", ("*.io",), 60.0, API_V1, env=(("PASS", "p2"),)),
        ),
        str(tmp_path), "sha256:x", False,
    )  # fmt: skip
    assert d1.bin_dir == d2.bin_dir
    keyring = PluginKeyring(loaded, None)
    creds = await keyring.lookup("reg.io/team/app", {"metadata": {"name": "p"}, "spec": {}})
    assert [(c.username, c.password) for c in creds] == [("u", "p1"), ("u2", "p2")]
    assert await keyring.lookup("elsewhere.com/app", {"metadata": {}, "spec": {}}) == []
