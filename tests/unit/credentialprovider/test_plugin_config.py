"""CredentialProviderConfig files as upstream reads them: strict decoding of
the v1 / v1beta1 / v1alpha1 formats, a directory of files merged in order,
and validation with every problem listed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubelet.credentialprovider.plugin.config import ConfigError, decode, read_config, validate
from kubelet.credentialprovider.plugin.plugins import PluginRegistrationError, load_plugins

GOOD = """
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: ecr
  matchImages: ["*.dkr.ecr.*.amazonaws.com", "registry.io:8080/path"]
  defaultCacheDuration: 12h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["get-credentials"]
  env: [{name: AWS_PROFILE, value: node}]
"""


def test_a_v1_file_decodes_with_every_field() -> None:
    (p,) = decode(GOOD.encode(), "f").providers
    assert p.name == "ecr" and p.match_images == (
        "*.dkr.ecr.*.amazonaws.com",
        "registry.io:8080/path",
    )
    assert p.default_cache_duration == 12 * 3600 and p.args == ("get-credentials",)
    assert p.env == (("AWS_PROFILE", "node"),) and p.token_attributes is None
    assert validate(decode(GOOD.encode(), "f"), True) == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            GOOD.replace("kind: CredentialProviderConfig", "kind: KubeletConfiguration"),
            "wrong Kind",
        ),
        (GOOD.replace("kubelet.config.k8s.io/v1\n", "example.com/v1\n"), "unexpected apiVersion"),
        (GOOD.replace("  args:", "  argz:"), 'unknown field "argz"'),
        (GOOD + "extra: 1\n", 'unknown field "extra"'),
        (GOOD.replace("12h", "12 hours"), "defaultCacheDuration"),
        # tokenAttributes is a v1 field only.
        (
            GOOD.replace("config.k8s.io/v1\n", "config.k8s.io/v1beta1\n")
            + "  tokenAttributes: {serviceAccountTokenAudience: a}\n",
            'unknown field "tokenAttributes"',
        ),
        ("[1, 2]", "not an object"),
    ],
)
def test_strict_decoding(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        decode(text.encode(), "f")


def test_validation_lists_every_problem() -> None:
    text = """
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: a/b
  matchImages: []
  apiVersion: credentialprovider.kubelet.k8s.io/v2
- name: a/b
  matchImages: ["bad host/x", "ok.io"]
  defaultCacheDuration: -1s
  apiVersion: credentialprovider.kubelet.k8s.io/v1beta1
  tokenAttributes:
    serviceAccountTokenAudience: ""
    cacheType: Sometimes
    requireServiceAccount: false
    requiredServiceAccountAnnotationKeys: ["Bad Key!", "example.com/x"]
    optionalServiceAccountAnnotationKeys: ["example.com/x"]
"""
    errs = validate(decode(text.encode(), "f"), sa_tokens_enabled=False)
    joined = "\n".join(errs)
    for want in (
        "provider name cannot contain '/'",
        'providers.name: Duplicate value: "a/b"',
        'Unsupported value: "credentialprovider.kubelet.k8s.io/v2"',
        "at least 1 item in matchImages is required",
        "providers.defaultCacheDuration: Required value",
        'Invalid value: "bad host/x": match image is invalid',
        "must be greater than or equal to 0",
        "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
        "serviceAccountTokenAudience: Required value",
        "only supported for credentialprovider.kubelet.k8s.io/v1 API version",
        "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
        'Invalid value: "Bad Key!"',
        "annotation keys cannot be both required and optional",
        'Unsupported value: "Sometimes"',
    ):
        assert want in joined, want
    assert validate(decode(b"apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n",
                           "f"), True) == ["providers: Required value: at least 1 item in plugins is required"]  # fmt: skip


def test_a_directory_is_merged_in_lexical_order(tmp_path: Path) -> None:
    d = tmp_path / "conf.d"
    d.mkdir()
    (d / "20-b.yaml").write_text(GOOD.replace("name: ecr", "name: b"))
    (d / "10-a.json").write_text(
        '{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "CredentialProviderConfig", '
        '"providers": [{"name": "a", "matchImages": ["a.io"], "defaultCacheDuration": "1m", '
        '"apiVersion": "credentialprovider.kubelet.k8s.io/v1beta1"}]}'
    )
    (d / "README.md").write_text("ignored")
    cfg, digest = read_config(str(d))
    assert [p.name for p in cfg.providers] == ["a", "b"]
    assert digest.startswith("sha256:") and len(digest) == 71
    (d / "30-dup.yml").write_text(GOOD.replace("name: ecr", "name: a"))
    with pytest.raises(ConfigError, match="duplicate provider name 'a'"):
        read_config(str(d))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no configuration files found"):
        read_config(str(empty))
    with pytest.raises(ConfigError, match="unable to access path"):
        read_config(str(tmp_path / "missing"))


def test_loading_checks_the_bin_dir_and_each_plugin(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    bins = tmp_path / "bin"
    with pytest.raises(PluginRegistrationError, match=r"plugin binary directory .* did not exist"):
        load_plugins(str(cfg), str(bins), True)
    bins.mkdir()
    with pytest.raises(
        PluginRegistrationError, match=r"plugin binary executable .*/ecr did not exist"
    ):
        load_plugins(str(cfg), str(bins), True)
    (bins / "ecr").write_text("#!/bin/sh\n")
    with pytest.raises(PluginRegistrationError, match="permission denied"):
        load_plugins(str(cfg), str(bins), True)
    os.chmod(bins / "ecr", 0o755)
    loaded = load_plugins(str(cfg), str(bins), True)
    assert [p.name for p in loaded.providers] == ["ecr"]
    cfg.write_text(GOOD.replace("  defaultCacheDuration: 12h\n", ""))
    with pytest.raises(
        PluginRegistrationError, match="failed to validate credential provider config"
    ):
        load_plugins(str(cfg), str(bins), True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_kubelet_exits_1_when_the_plugins_cannot_be_registered(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD.replace("  defaultCacheDuration: 12h\n", ""))
    (tmp_path / "bin").mkdir()
    bad = subprocess.run(
        [
            sys.executable, "-m", "kubelet",
            "--image-credential-provider-config", str(cfg),
            "--image-credential-provider-bin-dir", str(tmp_path / "bin"),
            "--root-dir", str(tmp_path / "root"), "--cert-dir", str(tmp_path / "pki"),
            "--container-runtime-endpoint", f"unix://{tmp_path}/none.sock",
            "--healthz-port=0", "--read-only-port=0", f"--port={_free_port()}",
            "--authorization-mode=AlwaysAllow",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    assert (
        "Failed to register CRI auth plugins: failed to validate credential provider config"
        in bad.stderr
    )
    assert "providers.defaultCacheDuration: Required value" in bad.stderr
