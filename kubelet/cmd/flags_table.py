"""The kubelet's flags: every flag of the upstream kubelet (from the generated
list in kubelet/apis/config/data/flags.jsonl) plus this kubelet's own, each
with a parser for pflag's value type.

A flag that writes a KubeletConfiguration field yields the field's JSON value
(what a config file would hold), so flags and files go through one decode.
"""

from __future__ import annotations

import csv
import functools
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet.apis.config import upstream
from kubelet.features import parse_gates
from kubelet.util.duration import format_duration, parse_duration
from kubelet.util.quantity import parse_quantity

Parser = Callable[[str], Any]


@dataclass(frozen=True)
class Flag:
    name: str
    shorthand: str
    parse: Parser
    field: str  # KubeletConfiguration JSON path written, or ""
    attr: str  # KubeletFlags attribute written, or "" (then KubeletFlags.other)
    usage: str
    default: str
    deprecated: str = ""
    is_bool: bool = False
    # Repeated use: "replace" (last wins), or accumulate into a map / list
    # (the first use replaces what the file had, as pflag's map and slice values do).
    repeat: str = "replace"
    extension: bool = False  # this kubelet's own, not upstream's


# ---- value parsers: the JSON value, or ValueError with pflag's wording ----


def parse_bool(v: str) -> bool:
    if v in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if v in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{v}": invalid syntax')


def _int_parser(bits: int, signed: bool = True) -> Parser:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    fn = "ParseInt" if signed else "ParseUint"

    def parse(v: str) -> int:
        text = v.replace("_", "")
        body = text.lstrip("+-")
        try:
            if len(body) > 1 and body[0] == "0" and body[1].isdigit():
                n = int(
                    text[: len(text) - len(body)] + "0o" + body[1:], 0
                )  # Go: leading 0 is octal
            else:
                n = int(text, 0)
        except ValueError:
            raise ValueError(f'strconv.{fn}: parsing "{v}": invalid syntax') from None
        if not lo <= n <= hi:
            raise ValueError(f'strconv.{fn}: parsing "{v}": value out of range')
        return n

    return parse


def parse_float(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{v}": invalid syntax') from None


def parse_go_duration(v: str) -> str:
    return format_duration(parse_duration(v))


def parse_ip(v: str) -> str:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f'"{v}" is not a valid IP address') from None
    return v


def parse_quantity_text(v: str) -> str:
    parse_quantity(v)
    return v


def parse_string_slice(v: str) -> list[str]:
    if not v:
        return []
    return next(csv.reader([v]))


def _map_parser(sep: str, split: bool = True) -> Parser:
    def parse(v: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in v.split(",") if split else [v]:
            if not item.strip() and split:
                continue
            k, s, val = item.partition(sep)
            if not s:
                raise ValueError(f"malformed pair, expect string{sep}string")
            out[k.strip()] = val.strip()
        return out

    return parse


def parse_map_bool(v: str) -> dict[str, bool]:
    return parse_gates(v)


def parse_multimap(v: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in v.split(","):
        if not item.strip():
            continue
        k, s, val = item.partition(":")
        if not s:
            raise ValueError(f"malformed pair, expect string:string: {item!r}")
        out.setdefault(k.strip(), []).append(val.strip())
    return out


def parse_taints(v: str) -> list[dict[str, str]]:
    out = []
    for item in parse_string_slice(v):
        kv, colon, effect = item.rpartition(":")
        if not colon:
            raise ValueError(f"invalid taint spec: {item!r}")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError(f"invalid taint effect: {effect}, unsupported taint effect")
        key, _, value = kv.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        out.append(taint)
    return out


def _atoi(v: str) -> int:
    """strconv.Atoi: decimal digits with an optional sign, nothing else."""
    body = v[1:] if v[:1] in "+-" else v
    if not body.isascii() or not body.isdigit():
        raise ValueError(v)
    return int(v)


def parse_reserved_memory(v: str) -> list[dict[str, Any]]:
    """ReservedMemoryVar: "0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi", one
    reservation per NUMA node, with upstream's messages (typos included)."""
    out: list[dict[str, Any]] = []
    for reservation in v.split(";") if v else []:
        parts = reservation.split(":")
        if len(parts) != 2:
            raise ValueError(
                "the reserved memory has incorrect format, expected "
                f"numaNodeID:type=quantity[,type=quantity...], got {reservation}"
            )
        numa, limits_text = parts
        try:
            node = _atoi(numa)
        except ValueError:
            raise ValueError(
                f"failed to convert the NUMA node ID, exptected integer, got {numa}"
            ) from None
        limits: dict[str, str] = {}
        for item in limits_text.split(","):
            kv = item.split("=")
            if len(kv) != 2:
                raise ValueError(
                    f"the reserved limit has incorrect value, expected type=quantatity, got {item}"
                )
            name, qty = kv
            if name != "memory" and not name.startswith("hugepages-"):
                raise ValueError(f'memory type conversion error, unknown type: "{name}"')
            try:
                parse_quantity(qty)
            except ValueError:
                raise ValueError(
                    f"failed to parse the quantatity, expected quantatity, got {qty}"
                ) from None
            limits[name] = qty
        out.append({"numaNode": node, "limits": limits})
    return out


def parse_vmodule(v: str) -> list[dict[str, Any]]:
    out = []
    for item in v.split(","):
        if not item:
            continue
        pattern, eq, level = item.partition("=")
        if not eq:
            raise ValueError(f"{item!r} does not have the pattern=N format")
        out.append({"filePattern": pattern, "verbosity": _int_parser(32, signed=False)(level)})
    return out


def parse_version(v: str) -> str:
    if v not in ("true", "false", "raw") and not v.startswith("v"):
        parse_bool(v)
    return v


_BY_TYPE: dict[str, tuple[Parser, str]] = {
    "string": (str, "replace"),
    "bool": (parse_bool, "replace"),
    "int": (_int_parser(64), "replace"),
    "int32": (_int_parser(32), "replace"),
    "int64": (_int_parser(64), "replace"),
    "Level": (_int_parser(32, signed=False), "replace"),
    "float64": (parse_float, "replace"),
    "duration": (parse_go_duration, "replace"),
    "ip": (parse_ip, "replace"),
    "quantity": (parse_quantity_text, "replace"),
    "stringSlice": (parse_string_slice, "append"),
    "mapStringString": (_map_parser("="), "merge"),
    "mapStringBool": (parse_map_bool, "merge"),
    "colonSeparatedMultimapStringString": (parse_multimap, "merge_lists"),
    "[]v1.Taint": (parse_taints, "replace"),
    "reserved-memory": (parse_reserved_memory, "append"),
    "pattern=N,...": (parse_vmodule, "replace"),
    "version": (parse_version, "replace"),
}
# Map flags whose values upstream splits differently (same pflag type name).
_BY_NAME: dict[str, tuple[Parser, str]] = {
    "eviction-hard": (_map_parser("<"), "merge"),
    "eviction-soft": (_map_parser("<"), "merge"),
    "cpu-manager-policy-options": (_map_parser("=", split=False), "merge"),
}

# KubeletFlags attributes for the upstream instance flags this kubelet reads
# (keyed by the Go field upstream writes); the rest land in KubeletFlags.other.
INSTANCE_ATTRS = {
    "KubeConfig": "kubeconfig",
    "BootstrapKubeconfig": "bootstrap_kubeconfig",
    "HostnameOverride": "hostname_override",
    "NodeIP": "node_ip",
    "CertDirectory": "cert_directory",
    "RootDirectory": "root_directory",
    "KubeletConfigFile": "kubelet_config_file",
    "KubeletDropinConfigDirectory": "kubelet_dropin_config_directory",
    "NodeLabels": "node_labels",
    "LockFilePath": "lock_file_path",
    "ExitOnLockContention": "exit_on_lock_contention",
    "RuntimeCgroups": "runtime_cgroups",
    "SeccompDefault": "seccomp_default",
    "CloudProvider": "cloud_provider",
    "ImageCredentialProviderConfigPath": "image_credential_provider_config",
    "ImageCredentialProviderBinDir": "image_credential_provider_bin_dir",
}
# Flags upstream registers without a field behind them (their values go nowhere).
NAMED_ATTRS = {
    "pod-infra-container-image": "pod_infra_container_image",
    "help": "show_help",
    "version": "show_version",
}

# This kubelet's own flags.
EXTENSIONS = (
    Flag(
        "pleg-relist-period",
        "",
        parse_go_duration,
        "plegRelistPeriod",
        "",
        "Period of the generic PLEG relist (kubelet-py; upstream is fixed at 1s; minimum 50ms).",
        "1s",
        extension=True,
    ),
    Flag(
        "pod-logs-dir",
        "",
        str,
        "podLogsDir",
        "",
        "Directory where the container runtime writes pod logs (the podLogsDir field; kubelet-py).",
        "/var/log/pods",
        extension=True,
    ),
)


@functools.cache
def flags() -> dict[str, Flag]:
    out: dict[str, Flag] = {}
    for name, u in upstream.flags().items():
        parse, repeat = _BY_NAME.get(name) or _BY_TYPE[u.type]
        attr = NAMED_ATTRS.get(name) or INSTANCE_ATTRS.get(u.instance.split(".")[-1], "")
        out[name] = Flag(
            name,
            u.shorthand,
            parse,
            u.field,
            attr,
            u.usage,
            u.default,
            u.deprecated,
            is_bool=u.no_opt_value == "true",
            repeat=repeat,
        )
    for fl in EXTENSIONS:
        out[fl.name] = fl
    return out


@functools.cache
def shorthands() -> dict[str, Flag]:
    return {f.shorthand: f for f in flags().values() if f.shorthand}
