"""Kubelet flags (cmd/kubelet/app/options): instance settings, and the flags
that override KubeletConfiguration fields.

The flag table is flags_table.flags() (upstream's, generated, plus this
kubelet's own). Parsing follows pflag, which the Go kubelet uses:
`--name=value` or `--name value`, `_` and `-` alike in names; booleans take
`--name` or `--name=false` only (a bare `--name false` leaves "false" as a
positional argument, as in Go).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kubelet.apis.config import upstream
from kubelet.apis.config.types import KubeletConfiguration
from kubelet.cmd.flags_table import Flag, flags, shorthands


@dataclass
class KubeletFlags:
    """Settings of one kubelet instance that are not part of KubeletConfiguration."""

    kubelet_config_file: str = ""
    kubelet_dropin_config_directory: str = ""
    kubeconfig: str = ""
    bootstrap_kubeconfig: str = ""
    hostname_override: str = ""
    node_ip: str = ""
    root_directory: str = "/var/lib/kubelet"
    cert_directory: str = "/var/lib/kubelet/pki"
    node_labels: dict[str, str] = field(default_factory=dict)
    lock_file_path: str = ""
    exit_on_lock_contention: bool = False
    pod_infra_container_image: str = ""
    runtime_cgroups: str = ""
    seccomp_default: bool = False
    cloud_provider: str = ""
    image_credential_provider_config: str = ""
    image_credential_provider_bin_dir: str = ""
    show_help: bool = False
    show_version: str = ""
    # Upstream flags this kubelet keeps no attribute for: name -> value as given.
    other: dict[str, str] = field(default_factory=dict)


@dataclass
class ParsedArgs:
    # (flag, raw text, parsed value) in command-line order.
    values: list[tuple[Flag, str, Any]]
    positional: list[str]
    problems: list[str]

    def given(self) -> dict[str, str]:
        """Flag name -> the raw value last given."""
        return {fl.name: raw for fl, raw, _ in self.values}

    def deprecation_warnings(self) -> list[str]:
        """pflag's message for each deprecated flag used."""
        seen: dict[str, str] = {}
        for fl, _, _ in self.values:
            if fl.deprecated:
                seen.setdefault(fl.name, f"Flag --{fl.name} has been deprecated, {fl.deprecated}")
        return list(seen.values())


def _lookup(arg: str) -> tuple[Flag | None, str, str, bool]:
    """(flag, label, raw value, value given with =) of one argument."""
    if arg.startswith("--"):
        name, eq, raw = arg[2:].partition("=")
        return flags().get(name.replace("_", "-")), f"--{name}", raw, bool(eq)
    name, eq, raw = arg[1:].partition("=")
    if not eq and len(name) > 1 and name[0] in shorthands():
        # -v4: shorthand with its value attached
        return shorthands()[name[0]], f"-{name[0]}", name[1:], True
    return shorthands().get(name), f"-{name}", raw, bool(eq)


def parse_args(argv: list[str]) -> ParsedArgs:
    values: list[tuple[Flag, str, Any]] = []
    positional: list[str] = []
    problems: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional.extend(argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        flag, label, raw, has_value = _lookup(arg)
        if flag is None:
            problems.append(f"unknown flag: {label}")
            continue
        if not has_value:
            if flag.is_bool:
                raw = "true"
            elif i < len(argv):
                raw = argv[i]
                i += 1
            else:
                problems.append(f"flag needs an argument: {label}")
                continue
        try:
            values.append((flag, raw, flag.parse(raw)))
        except ValueError as err:
            problems.append(f'invalid argument "{raw}" for "{label}" flag: {err}')
    return ParsedArgs(values, positional, problems)


def _combine(repeat: str, current: Any, value: Any, first: bool) -> Any:
    if repeat == "replace" or first:
        return copy.deepcopy(value)
    if repeat == "append":
        return [*current, *value]
    if repeat == "merge_lists":
        out = {k: list(v) for k, v in current.items()}
        for k, v in value.items():
            out.setdefault(k, []).extend(v)
        return out
    return {**current, **value}


def apply_instance_flags(parsed: ParsedArgs, kf: KubeletFlags) -> None:
    """The flags that set KubeletFlags, in command-line order."""
    seen: set[str] = set()
    for flag, raw, value in parsed.values:
        if flag.field:
            continue
        if not flag.attr:
            kf.other[flag.name] = raw
            continue
        current = getattr(kf, flag.attr)
        setattr(kf, flag.attr, _combine(flag.repeat, current, value, flag.name not in seen))
        seen.add(flag.name)


def flag_overlay(parsed: ParsedArgs) -> dict[str, Any]:
    """The config fields the flags set: JSON path -> JSON value. Feature gates
    are merged per gate over the file's by the caller."""
    out: dict[str, Any] = {}
    for flag, _, value in parsed.values:
        if not flag.field:
            continue
        first = flag.field not in out
        out[flag.field] = _combine(flag.repeat, out.get(flag.field), value, first)
    return out


def usage() -> str:
    lines = [
        "The kubelet is the primary node agent that runs on each node. It registers the node",
        "with the apiserver, or runs standalone with pods from --pod-manifest-path / --manifest-url.",
        "",
        "Usage:",
        "  kubelet [flags]",
        "",
        "Flags:",
    ]
    for fl in sorted(flags().values(), key=lambda x: x.name):
        head = f"-{fl.shorthand}, --{fl.name}" if fl.shorthand else f"    --{fl.name}"
        text = fl.usage
        default = _default_text(fl)
        if default:
            text += f" (default {default})"
        if fl.deprecated:
            text += f" (DEPRECATED: {fl.deprecated})"
        lines.append(f"  {head}")
        lines.append(f"        {text}")
    return "\n".join(lines) + "\n"


def _default_text(fl: Flag) -> str:
    """The default this kubelet uses: for a config field its v1beta1 default
    (not upstream's legacy flag default, see docs/configuration.md)."""
    if fl.field and not fl.extension:
        fld = upstream.fields()[fl.field]
        if fld.default in (None, "", [], {}, False, 0, "0s", "0"):
            return ""
        return str(fld.default).lower() if isinstance(fld.default, bool) else str(fld.default)
    return "" if fl.default in ("", "[]", "false", "0", "0s") else fl.default


@dataclass
class KubeletServer:
    """Everything needed to run a kubelet: instance flags and shared configuration
    (options.KubeletServer upstream), with the whole v1beta1 document in force
    (what /configz serves: it also holds the fields this kubelet does not model)."""

    flags: KubeletFlags
    config: KubeletConfiguration
    document: dict[str, Any] = field(default_factory=dict)


__all__ = [
    "KubeletFlags",
    "KubeletServer",
    "ParsedArgs",
    "apply_instance_flags",
    "flag_overlay",
    "parse_args",
    "usage",
]
