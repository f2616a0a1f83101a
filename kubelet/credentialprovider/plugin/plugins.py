"""The credential provider plugins of a node (plugin/plugins.go and
RegisterCredentialProviderPlugins upstream).

load_plugins reads and validates --image-credential-provider-config against
--image-credential-provider-bin-dir once at start: any problem is fatal, as
upstream exits 1 on it. PluginKeyring then answers, for one image pulled for
one pod, the credentials of every plugin that matches it (plugin order), as a
keyring over the plugins' docker configs.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from prometheus_client import Gauge

from kubelet import metrics
from kubelet.credentialprovider.keyring import AuthConfig, BasicDockerKeyring
from kubelet.credentialprovider.plugin import plugin as p
from kubelet.credentialprovider.plugin.config import (
    ConfigError,
    CredentialProvider,
    read_config,
    validate,
)
from kubelet.types import Pod

CONFIG_INFO = Gauge(
    "kubelet_credential_provider_config_info",
    "Information about the last applied credential provider configuration with hash as label",
    ["hash"],
    registry=None,
)


class PluginRegistrationError(Exception):
    """The plugins cannot be set up (the kubelet exits 1 with this)."""


@dataclass(frozen=True)
class LoadedPlugins:
    providers: tuple[CredentialProvider, ...]
    bin_dir: str
    config_hash: str
    sa_tokens: bool  # KubeletServiceAccountTokenForCredentialProviders


def load_plugins(config_path: str, bin_dir: str, sa_tokens: bool) -> LoadedPlugins:
    if not os.path.exists(bin_dir):
        raise PluginRegistrationError(f"plugin binary directory {bin_dir} did not exist")
    if not os.path.isdir(bin_dir):
        raise PluginRegistrationError(
            f"error inspecting binary directory {bin_dir}: not a directory"
        )
    try:
        config, digest = read_config(config_path)
    except ConfigError as err:
        raise PluginRegistrationError(str(err)) from None
    errs = validate(config, sa_tokens)
    if errs:
        raise PluginRegistrationError(
            "failed to validate credential provider config: [" + ", ".join(errs) + "]"
        )
    for prov in config.providers:
        binary = os.path.join(bin_dir, prov.name)
        if not os.path.isfile(binary):
            raise PluginRegistrationError(f"plugin binary executable {binary} did not exist")
        if not os.access(binary, os.X_OK):
            raise PluginRegistrationError(
                f"error inspecting binary executable {binary}: permission denied"
            )
    return LoadedPlugins(tuple(config.providers), bin_dir, digest, sa_tokens)


def _sa_mode(prov: CredentialProvider, sa_tokens: bool) -> p.ServiceAccountMode | None:
    t = prov.token_attributes
    if not sa_tokens or t is None or not t.audience:
        return None
    return p.ServiceAccountMode(
        t.audience,
        bool(t.require_service_account),
        t.required_annotation_keys,
        t.optional_annotation_keys,
        t.cache_type,
    )


class PluginKeyring:
    """Per-pod lookups over every registered plugin (externalCredentialProviderKeyring)."""

    def __init__(self, loaded: LoadedPlugins, accounts: p.ServiceAccounts | None) -> None:
        self.sa_tokens = loaded.sa_tokens
        self.providers = [
            p.PluginProvider(
                prov,
                p.ExecPlugin(prov.name, prov.api_version, loaded.bin_dir, prov.args, prov.env),
                _sa_mode(prov, loaded.sa_tokens),
                accounts,
            )
            for prov in loaded.providers
        ]
        metrics.register_once(p.PLUGIN_ERRORS, p.PLUGIN_DURATION, CONFIG_INFO)
        CONFIG_INFO.clear()
        CONFIG_INFO.labels(loaded.config_hash).set(1)

    async def lookup(self, image: str, pod: Pod) -> list[AuthConfig]:
        """The plugins' credentials for image (a repository, no tag) pulled for pod."""
        who: p.PodIdentity | None = None
        if self.sa_tokens:
            md = pod.get("metadata") or {}
            who = p.PodIdentity(
                str(md.get("namespace") or ""),
                str(md.get("name") or ""),
                str(md.get("uid") or ""),
                str((pod.get("spec") or {}).get("serviceAccountName") or ""),
            )
        answers = await asyncio.gather(*(prov.provide(image, who) for prov in self.providers))
        keyring = BasicDockerKeyring()
        for config, _ref in answers:
            keyring.add(None, config)
        return keyring.lookup(image)
