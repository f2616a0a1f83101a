"""Which pull-secret credentials go with which image, as upstream's keyring:
docker.io normalisation, host:port, path prefixes, wildcard hosts, the
index.docker.io fallback, and both secret formats (auth field included)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubelet.credentialprovider.config import DockerConfigError
from kubelet.credentialprovider.keyring import BasicDockerKeyring, UnionDockerKeyring, urls_match
from kubelet.credentialprovider.secrets import make_docker_keyring
from kubelet.util.parsers import ImageNameError, parse_image_name


def b64(s: str | bytes) -> str:
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


def config_json_secret(name: str, auths: dict[str, Any], uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid or name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(json.dumps({"auths": auths}))},
    }


def users(keyring: Any, image: str) -> list[str]:
    repo, _, _ = parse_image_name(image)
    return [a.username for a in keyring.lookup(repo)]


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("index.docker.io/busybox", "docker.io/library/busybox"),
        ("docker.io/team/app@sha256:" + "a" * 64, "docker.io/team/app"),
        ("team/app", "docker.io/team/app"),
        ("localhost/app", "localhost/app"),
        ("localhost:5000/a/b:v1", "localhost:5000/a/b"),
        ("Registry.Example.com/a", "Registry.Example.com/a"),
        ("[::1]:5000/app", "[::1]:5000/app"),
    ],
)
def test_image_names_are_normalised_as_the_reference_library_does(image: str, repo: str) -> None:
    assert parse_image_name(image)[0] == repo


@pytest.mark.parametrize("image", ["team/App", "a" * 64, "app::1", "app:", "-app", ""])
def test_invalid_image_names_are_errors(image: str) -> None:
    with pytest.raises(ImageNameError, match="couldn't parse image name"):
        parse_image_name(image)


@pytest.mark.parametrize(
    ("glob", "target", "match"),
    [
        ("*.kubernetes.io", "prefix.kubernetes.io", True),
        ("prefix.*.io", "prefix.kubernetes.io", True),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", True),
        ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", True),
        ("*.kubernetes.io:1111/blah", "prefix.kubernetes.io:1111/blah", True),
        ("*.kubernetes.io", "kubernetes.io", False),  # one label per '*'
        ("*.*.kubernetes.io", "prefix.kubernetes.io", False),
        ("*kubernetes.io", "a.kubernetes.io", False),
        ("kubernetes.io", "kubernetes.com", False),
        ("*.kubernetes.io:1234/blah", "prefix.kubernetes.io:1111/blah", False),
        ("prefix.*.io/foo", "prefix.kubernetes.io:1111/foo/bar", False),  # ports differ
        ("registry.io/team", "registry.io/other/app", False),
        ("bad host/x", "bad host/x", False),  # Go's url.Parse refuses it
    ],
)
def test_registry_globs(glob: str, target: str, match: bool) -> None:
    assert urls_match(glob, target) is match


def test_lookup_orders_longer_keys_first_and_falls_back_to_index_docker_io() -> None:
    k = make_docker_keyring(
        [
            config_json_secret(
                "a",
                {
                    "https://index.docker.io/v1/": {"username": "hub", "password": "p"},
                    "localhost:5000": {"username": "host"},
                    "http://localhost:5000/v2/team": {"username": "team"},
                    "*.example.com": {"username": "wild"},
                    "bad:port:x": {"username": "never"},
                },
            )
        ]
    )
    assert users(k, "busybox") == ["hub"]  # docker.io/library/busybox: the fallback
    assert users(k, "docker.io/team/app") == ["hub"]
    assert users(k, "localhost:5000/team/app:1") == ["team", "host"]
    assert users(k, "localhost:5000/other") == ["host"]
    assert users(k, "localhost:5001/other") == []
    assert users(k, "r.example.com/app") == ["wild"]
    assert users(k, "a.b.example.com/app") == []
    assert users(k, "quay.io/app") == []


def test_secrets_in_order_auth_field_and_legacy_dockercfg() -> None:
    legacy = {
        "metadata": {"name": "old", "namespace": "ns"},
        "type": "kubernetes.io/dockercfg",
        "data": {".dockercfg": b64(json.dumps({"reg.io": {"auth": b64("u2:p:2").rstrip("=")}}))},
    }
    k = make_docker_keyring(
        [
            config_json_secret("first", {"reg.io": {"auth": b64("u1:p1"), "username": "ignored"}}),
            legacy,
            # Neither docker config type: passed over, as upstream.
            {"metadata": {"name": "o"}, "type": "Opaque", "data": {".dockerconfigjson": "e30="}},
        ]
    )
    got = k.lookup("reg.io/app")
    assert [(a.username, a.password) for a in got] == [("u1", "p1"), ("u2", "p:2")]
    assert got[0].source is not None and got[0].source.name == "first"
    union = UnionDockerKeyring([k, BasicDockerKeyring()])
    assert [a.username for a in union.lookup("reg.io/x")] == ["u1", "u2"]


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"auths": []}',
        b'{"auths": {"reg.io": {"auth": "!!notbase64"}}}',
        b'{"auths": {"reg.io": {"auth": "' + base64.b64encode(b"nocolon") + b'"}}}',
    ],
)
def test_a_malformed_docker_config_secret_fails_the_keyring(data: bytes) -> None:
    s = {
        "metadata": {"name": "bad"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(data).decode()},
    }
    with pytest.raises(DockerConfigError):
        make_docker_keyring([config_json_secret("good", {"reg.io": {"username": "u"}}), s])


def test_node_docker_config_files_are_read_in_order_and_cached(tmp_path: Any) -> None:
    from kubelet.credentialprovider.provider import NodeDockerKeyring

    now = [0.0]
    root = tmp_path / "root"
    root.mkdir()
    dirs = ([str(root), str(tmp_path / "home-docker")], [str(root)])
    k = NodeDockerKeyring(str(root), lifetime=300, clock=lambda: now[0], search_paths=dirs)
    assert k.lookup("reg.io/app") == []
    (root / ".dockercfg").write_text(json.dumps({"reg.io": {"username": "legacy"}}))
    assert k.lookup("reg.io/app") == []  # cached for five minutes, as upstream
    now[0] = 301
    assert [a.username for a in k.lookup("reg.io/app")] == ["legacy"]
    (tmp_path / "home-docker").mkdir()
    (tmp_path / "home-docker" / "config.json").write_text(
        json.dumps({"auths": {"reg.io": {"auth": b64("json:pw")}}})
    )
    now[0] = 602
    # Any config.json wins over every .dockercfg; a broken one is passed over.
    (root / "config.json").write_text("{broken")
    got = k.lookup("reg.io/app")
    assert [(a.username, a.password, a.source) for a in got] == [("json", "pw", None)]
