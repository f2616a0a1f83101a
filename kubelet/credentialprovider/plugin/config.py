"""The CredentialProviderConfig file of --image-credential-provider-config
(plugin/config.go upstream).

The path is a file, or a directory whose *.json, *.yaml and *.yml files are
read in lexical order and merged (a provider name may appear once across
them). Each file is a kubelet.config.k8s.io v1, v1beta1 or v1alpha1
CredentialProviderConfig, decoded strictly (an unknown field is an error).
Validation collects every problem with its field path, as upstream's.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubelet.credentialprovider.keyring import parse_schemeless_url
from kubelet.util.duration import parse_duration
from kubelet.util.validation import is_qualified_name

CONFIG_GROUP = "kubelet.config.k8s.io"
CONFIG_VERSIONS = ("v1", "v1beta1", "v1alpha1")
KIND = "CredentialProviderConfig"
API_V1 = "credentialprovider.kubelet.k8s.io/v1"
PLUGIN_API_VERSIONS = (
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    API_V1,
)
CACHE_TYPE_SERVICE_ACCOUNT = "ServiceAccount"
CACHE_TYPE_TOKEN = "Token"
_PROVIDER_FIELDS = {"name", "matchImages", "defaultCacheDuration", "apiVersion", "args", "env"}
_TOKEN_FIELDS = {"serviceAccountTokenAudience", "cacheType", "requireServiceAccount",
                 "requiredServiceAccountAnnotationKeys", "optionalServiceAccountAnnotationKeys"}  # fmt: skip


class ConfigError(ValueError):
    """A credential provider configuration that cannot be used."""


@dataclass(frozen=True)
class TokenAttributes:
    audience: str
    cache_type: str
    require_service_account: bool | None
    required_annotation_keys: tuple[str, ...] = ()
    optional_annotation_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class CredentialProvider:
    name: str
    match_images: tuple[str, ...]
    default_cache_duration: float | None  # seconds; None: not given (invalid)
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    token_attributes: TokenAttributes | None = None


@dataclass
class CredentialProviderConfig:
    providers: list[CredentialProvider] = field(default_factory=list)


def _strings(doc: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key}: must be a list of strings")
    return tuple(value)


def _string(doc: dict[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: must be a string")
    return value


def _unknown(doc: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(doc) - known)
    if extra:
        raise ConfigError(f'{where}: unknown field "{extra[0]}"')


def _token_attributes(doc: object, where: str) -> TokenAttributes:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be an object")
    _unknown(doc, _TOKEN_FIELDS, where)
    require = doc.get("requireServiceAccount")
    if require is not None and not isinstance(require, bool):
        raise ConfigError(f"{where}.requireServiceAccount: must be a boolean")
    return TokenAttributes(
        _string(doc, "serviceAccountTokenAudience", where),
        _string(doc, "cacheType", where),
        require,
        _strings(doc, "requiredServiceAccountAnnotationKeys", where),
        _strings(doc, "optionalServiceAccountAnnotationKeys", where),
    )


def _provider(doc: object, where: str, version: str) -> CredentialProvider:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be an object")
    # tokenAttributes exists only in the v1 file format.
    _unknown(doc, _PROVIDER_FIELDS | ({"tokenAttributes"} if version == "v1" else set()), where)
    duration: float | None = None
    if doc.get("defaultCacheDuration") is not None:
        raw = doc["defaultCacheDuration"]
        if not isinstance(raw, str):
            raise ConfigError(f"{where}.defaultCacheDuration: must be a duration string")
        try:
            duration = parse_duration(raw)
        except ValueError as err:
            raise ConfigError(f"{where}.defaultCacheDuration: {err}") from None
    env = []
    for i, e in enumerate(doc.get("env") or []):
        if not isinstance(e, dict):
            raise ConfigError(f"{where}.env[{i}]: must be an object")
        _unknown(e, {"name", "value"}, f"{where}.env[{i}]")
        env.append(
            (_string(e, "name", f"{where}.env[{i}]"), _string(e, "value", f"{where}.env[{i}]"))
        )
    token = doc.get("tokenAttributes")
    return CredentialProvider(
        name=_string(doc, "name", where),
        match_images=_strings(doc, "matchImages", where),
        default_cache_duration=duration,
        api_version=_string(doc, "apiVersion", where),
        args=_strings(doc, "args", where),
        env=tuple(env),
        token_attributes=_token_attributes(token, f"{where}.tokenAttributes")
        if token is not None
        else None,
    )


def decode(data: bytes, source: str) -> CredentialProviderConfig:
    """One file (JSON is YAML). Raises ConfigError naming the file."""
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as err:
        raise ConfigError(f"error decoding config {source!r}: {err}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"error decoding config {source!r}: not an object")
    group, _, version = str(doc.get("apiVersion") or "").rpartition("/")
    if doc.get("kind") != KIND:
        raise ConfigError(
            f'error decoding config {source!r}: failed to decode "{doc.get("kind")}" (wrong Kind)'
        )
    if group != CONFIG_GROUP or version not in CONFIG_VERSIONS:
        raise ConfigError(
            f"error decoding config {source!r}: unexpected apiVersion {doc.get('apiVersion')!r}"
        )
    try:
        _unknown(doc, {"apiVersion", "kind", "providers"}, "")
        providers = doc.get("providers") or []
        if not isinstance(providers, list):
            raise ConfigError("providers: must be a list")
        return CredentialProviderConfig(
            [_provider(p, f"providers[{i}]", version) for i, p in enumerate(providers)]
        )
    except ConfigError as err:
        raise ConfigError(f"error decoding config {source!r}: {err}") from None


def read_config(path: str) -> tuple[CredentialProviderConfig, str]:
    """(the merged configuration, "sha256:<hex>" over the files read)."""
    if not path:
        raise ConfigError("credential provider config path is empty")
    try:
        is_dir = os.path.isdir(path)
        os.stat(path)
    except OSError as err:
        raise ConfigError(f"unable to access path {path!r}: {err}") from None
    files = [path]
    if is_dir:
        try:
            names = sorted(os.listdir(path))
        except OSError as err:
            raise ConfigError(f"unable to read directory {path!r}: {err}") from None
        files = [
            os.path.join(path, n) for n in names
            if os.path.splitext(n)[1] in (".json", ".yaml", ".yml")
            and not os.path.isdir(os.path.join(path, n))
        ]  # fmt: skip
        if not files:
            raise ConfigError(f"no configuration files found in directory {path!r}")
    digest = hashlib.sha256()
    merged = CredentialProviderConfig()
    names_seen: set[str] = set()
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read()
        except OSError as err:
            raise ConfigError(f"unable to read file {f!r}: {err}") from None
        digest.update(struct.pack(">Q", len(data)))  # length first: no ambiguity between files
        digest.update(data)
        for p in decode(data, f).providers:
            if p.name in names_seen:
                raise ConfigError(
                    f"duplicate provider name {p.name!r} found in configuration file(s)"
                )
            names_seen.add(p.name)
            merged.providers.append(p)
    return merged, "sha256:" + digest.hexdigest()


def validate(config: CredentialProviderConfig, sa_tokens_enabled: bool) -> list[str]:
    """Every problem, as field errors (validateCredentialProviderConfig)."""
    errs: list[str] = []
    if not config.providers:
        errs.append("providers: Required value: at least 1 item in plugins is required")
    seen: set[str] = set()
    for p in config.providers:
        errs += _validate_provider(p, seen, sa_tokens_enabled)
    return errs


def _validate_provider(p: CredentialProvider, seen: set[str], sa_tokens_enabled: bool) -> list[str]:
    errs: list[str] = []
    for bad, why in (
        ("/", "provider name cannot contain '/'"),
        (" ", "provider name cannot contain spaces"),
    ):
        if bad in p.name:
            errs.append(f'providers.name: Invalid value: "{p.name}": {why}')
    if p.name in (".", ".."):
        errs.append(
            f"providers.name: Invalid value: \"{p.name}\": provider name cannot be '{p.name}'"
        )
    if p.name in seen:
        errs.append(f'providers.name: Duplicate value: "{p.name}"')
    seen.add(p.name)
    if not p.api_version:
        errs.append("providers.apiVersion: Required value")
    elif p.api_version not in PLUGIN_API_VERSIONS:
        supported = ", ".join(f'"{v}"' for v in sorted(PLUGIN_API_VERSIONS))
        errs.append(
            f'providers.apiVersion: Unsupported value: "{p.api_version}": supported values: {supported}'
        )
    if not p.match_images:
        errs.append(
            "providers.matchImages: Required value: at least 1 item in matchImages is required"
        )
    for m in p.match_images:
        try:
            parse_schemeless_url(m)
        except ValueError as err:
            errs.append(
                f'providers.matchImages: Invalid value: "{m}": match image is invalid: {err}'
            )
    if p.default_cache_duration is None:
        errs.append("providers.defaultCacheDuration: Required value")
    elif p.default_cache_duration < 0:
        errs.append(
            "providers.defaultCacheDuration: Invalid value: must be greater than or equal to 0"
        )
    if p.token_attributes is not None:
        errs += _validate_token_attributes(p, sa_tokens_enabled)
    return errs


def _validate_token_attributes(p: CredentialProvider, sa_tokens_enabled: bool) -> list[str]:
    t = p.token_attributes
    assert t is not None
    path = "providers.tokenAttributes"
    errs: list[str] = []
    if not sa_tokens_enabled:
        errs.append(f"{path}: Forbidden: tokenAttributes is not supported when "
                    "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled")  # fmt: skip
    if not t.audience:
        errs.append(f"{path}.serviceAccountTokenAudience: Required value")
    if t.require_service_account is None:
        errs.append(f"{path}.requireServiceAccount: Required value")
    if p.api_version != API_V1:
        errs.append(
            f"{path}: Forbidden: tokenAttributes is only supported for {API_V1} API version"
        )
    if t.require_service_account is False and t.required_annotation_keys:
        errs.append(f"{path}.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount "
                    "cannot be false when requiredServiceAccountAnnotationKeys is set")  # fmt: skip
    for name, keys in (("requiredServiceAccountAnnotationKeys", t.required_annotation_keys),
                       ("optionalServiceAccountAnnotationKeys", t.optional_annotation_keys)):  # fmt: skip
        dup: set[str] = set()
        for k in keys:
            errs += [
                f'{path}.{name}: Invalid value: "{k}": {m}' for m in is_qualified_name(k.lower())
            ]
            if k in dup:
                errs.append(f'{path}.{name}: Duplicate value: "{k}"')
            dup.add(k)
    both = sorted(set(t.required_annotation_keys) & set(t.optional_annotation_keys))
    if both:
        errs.append(
            f"{path}: Invalid value: {both}: annotation keys cannot be both required and optional"
        )
    valid = (CACHE_TYPE_SERVICE_ACCOUNT, CACHE_TYPE_TOKEN)
    if not t.cache_type:
        errs.append(f"{path}.cacheType: Required value: cacheType is required to be set when "
                    f"tokenAttributes is specified. Supported values are: {', '.join(valid)}")  # fmt: skip
    elif t.cache_type not in valid:
        errs.append(f'{path}.cacheType: Unsupported value: "{t.cache_type}": supported values: '
                    + ", ".join(f'"{v}"' for v in valid))  # fmt: skip
    return errs
