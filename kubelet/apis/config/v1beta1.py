"""Decoding and encoding KubeletConfiguration files (kubelet.config.k8s.io/v1beta1).

Decoding is strict about fields nobody knows (an error naming the field) and
lenient about fields the Go kubelet knows but this project does not implement
(one warning per field), so a file written for the Go kubelet still loads.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import orjson
import yaml

from kubelet.apis.config.types import API_VERSION, KIND, KubeletConfiguration, json_name
from kubelet.util.duration import format_duration, parse_duration

# Fields of the upstream v1beta1 type that this project accepts but ignores.
UPSTREAM_ONLY_FIELDS = frozenset(
    {
        "iptablesMasqueradeBit",
        "iptablesDropBit",
        "cpuManagerPolicy",
        "cpuManagerPolicyOptions",
        "cpuManagerReconcilePeriod",
        "memoryManagerPolicy",
        "topologyManagerPolicy",
        "topologyManagerScope",
        "topologyManagerPolicyOptions",
        "qosReserved",
        "singleProcessOOMKill",
        "memorySwap",
        "reservedSystemCPUs",
        "showHiddenMetricsForVersion",
        "volumePluginDir",
        "kernelMemcgNotification",
        "enableSystemLogQuery",
        "crashLoopBackOff",
        "reservedMemory",
        "memoryThrottlingFactor",
        "tracing",
        "failCgroupV1",
        "userNamespaces",
        "imagePullCredentialsVerificationPolicy",
        "preloadedImagesVerificationAllowlist",
        "enableContentionProfiling",
        "configMapAndSecretChangeDetectionStrategy",
        "imageServiceEndpointTLS",
        "podLogsDirectory",
    }
)


# Non-pointer fields that upstream's SetDefaults_KubeletConfiguration fills in
# when they hold their zero value, so "0s" or "" in a file (kubeadm writes
# many) means "the default". Pointer fields keep an explicit zero.
ZERO_MEANS_DEFAULT = frozenset(
    {
        "syncFrequency",
        "fileCheckFrequency",
        "httpCheckFrequency",
        "address",
        "port",
        "authentication.webhook.cacheTTL",
        "authorization.mode",
        "authorization.webhook.cacheAuthorizedTTL",
        "authorization.webhook.cacheUnauthorizedTTL",
        "registryBurst",
        "eventBurst",
        "healthzBindAddress",
        "streamingConnectionIdleTimeout",
        "nodeStatusReportFrequency",
        "nodeStatusUpdateFrequency",
        "nodeLeaseDurationSeconds",
        "imageMinimumGCAge",
        "volumeStatsAggPeriod",
        "cgroupDriver",
        "runtimeRequestTimeout",
        "hairpinMode",
        "maxPods",
        "maxOpenFiles",
        "contentType",
        "kubeAPIBurst",
        "evictionPressureTransitionPeriod",
        "containerLogMaxSize",
        "containerLogMonitorInterval",
        "podLogsDir",
        "containerRuntimeEndpoint",
        "logging.format",
        "logging.flushFrequency",
        "plegRelistPeriod",
    }
)


class ConfigError(Exception):
    """A configuration file that cannot be used; .problems lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def load_file(path: str) -> tuple[KubeletConfiguration, list[str], set[str]]:
    """Read a YAML or JSON KubeletConfiguration file.

    Returns (config with defaults for absent fields, warnings, JSON paths that
    the file set). Raises ConfigError listing every problem found.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        raise ConfigError([f"failed to read kubelet config file {path!r}: {err}"]) from err
    try:
        # libyaml's safe loader when built in: the pure-Python one recurses
        # once per nesting level and fails deep files with RecursionError.
        loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(raw, Loader=loader) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError([f"failed to decode kubelet config file {path!r}: {err}"]) from err
    except RecursionError as err:
        raise ConfigError(
            [f"failed to decode kubelet config file {path!r}: nested too deeply"]
        ) from err
    if not isinstance(data, dict):
        raise ConfigError([f"kubelet config file {path!r} must hold a KubeletConfiguration object"])
    return decode(data, source=path)


def decode(
    data: dict[str, Any], source: str = "<config>"
) -> tuple[KubeletConfiguration, list[str], set[str]]:
    problems: list[str] = []
    warnings: list[str] = []
    api_version = data.get("apiVersion")
    kind = data.get("kind")
    if api_version != API_VERSION:
        problems.append(f"apiVersion: unsupported value {api_version!r}, want {API_VERSION!r}")
    if kind != KIND:
        problems.append(f"kind: unsupported value {kind!r}, want {KIND!r}")
    body = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
    cfg = KubeletConfiguration()
    seen: set[str] = set()
    _decode_into(cfg, body, "", problems, warnings, seen)
    _default_zero_values(cfg, KubeletConfiguration(), "")
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])
    return cfg, warnings, seen


def _decode_into(
    obj: Any,
    data: dict[str, Any],
    prefix: str,
    problems: list[str],
    warnings: list[str],
    seen: set[str],
) -> None:
    fields = {json_name(fl): fl for fl in dataclasses.fields(obj)}
    hints = typing.get_type_hints(type(obj))
    for key, value in data.items():
        path = f"{prefix}{key}"
        fl = fields.get(key)
        if fl is None:
            if not prefix and key in UPSTREAM_ONLY_FIELDS:
                warnings.append(f"{path}: not implemented by this kubelet, ignored")
            else:
                problems.append(f'{path}: unknown field "{path}"')
            continue
        if value is None:
            continue
        seen.add(path)
        hint = hints[fl.name]
        current = getattr(obj, fl.name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                problems.append(f"{path}: must be an object")
                continue
            _decode_into(current, value, path + ".", problems, warnings, seen)
            continue
        try:
            setattr(obj, fl.name, convert(value, hint, fl.metadata.get("kind", "")))
        except (TypeError, ValueError) as err:
            problems.append(f"{path}: {err}")


def _default_zero_values(obj: Any, defaults: Any, prefix: str) -> None:
    for fl in dataclasses.fields(obj):
        path = prefix + json_name(fl)
        value = getattr(obj, fl.name)
        if dataclasses.is_dataclass(value):
            _default_zero_values(value, getattr(defaults, fl.name), path + ".")
        elif path in ZERO_MEANS_DEFAULT and value in (0, 0.0, ""):
            setattr(obj, fl.name, getattr(defaults, fl.name))


def convert(value: Any, hint: Any, kind: str = "") -> Any:
    """Convert a decoded JSON/YAML value to the field's Python type."""
    if kind == "duration_or_ns":
        if isinstance(value, int) and not isinstance(value, bool):
            return value / 1e9
        kind = "duration"
    if kind == "duration":
        if isinstance(value, bool) or not isinstance(value, str):
            raise TypeError(f'want a duration string such as "1m30s", got {value!r}')
        return parse_duration(value)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return convert(value, args[0], kind)
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"want true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"want an integer, got {value!r}")
        if not -(2**63) <= value < 2**63:
            # Go's fields are int32/int64; past 64 bits /configz could not even encode it.
            raise ValueError(f"{value} is out of the 64-bit integer range")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"want a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(f"want a string, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"want a list, got {value!r}")
        (item,) = typing.get_args(hint)
        return [convert(v, item) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"want a map, got {value!r}")
        _, item = typing.get_args(hint)
        return {str(k): convert(v, item) for k, v in value.items()}
    # Free-form fields (logging options, vmodule): whatever JSON can carry, as
    # /configz serves them back.
    try:
        orjson.dumps(value)
    except TypeError as err:
        raise TypeError(f"not a JSON value: {err}") from None
    return value


def encode(cfg: Any) -> dict[str, Any]:
    """The configuration as the v1beta1 JSON object (durations as Go strings)."""
    out: dict[str, Any] = {}
    for fl in dataclasses.fields(cfg):
        value = getattr(cfg, fl.name)
        if dataclasses.is_dataclass(value):
            out[json_name(fl)] = encode(value)
        elif fl.metadata.get("kind") in ("duration", "duration_or_ns"):
            out[json_name(fl)] = format_duration(value)
        elif value is not None:
            out[json_name(fl)] = value
    return out


def encode_json(cfg: KubeletConfiguration) -> bytes:
    doc = {"kind": KIND, "apiVersion": API_VERSION, **encode(cfg)}
    return json.dumps(doc, sort_keys=False).encode()
