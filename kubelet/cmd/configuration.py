"""From the command line to the configuration in force, as NewKubeletCommand
does: defaults, the --config file, --config-dir drop-ins, defaults again,
then the flags (which win); then validation, the feature gates and the
account. Every problem is collected so one run reports all of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kubelet.apis.config import account, loader, upstream
from kubelet.apis.config.types import KubeletConfiguration
from kubelet.apis.config.v1beta1 import check_modeled, decode, document, encode, modeled_paths
from kubelet.apis.config.validation import validate_kubelet_configuration
from kubelet.cmd.options import KubeletFlags, ParsedArgs, flag_overlay
from kubelet.features import FeatureGate, gate_problems, gate_set_warnings


@dataclass
class Loaded:
    config: KubeletConfiguration
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _source_doc(path: str, what: str, problems: list[str]) -> dict[str, Any] | None:
    doc, read_problems = loader.read_yaml(path, what)
    problems.extend(read_problems)
    if doc is None:
        return None
    modeled = check_modeled(doc, path)
    clean, checked = loader.check_document(doc, path, skip=frozenset(_modeled()))
    problems.extend(checked + modeled)
    # A modeled field that failed its typed check leaves the document too.
    for bad in modeled:
        _drop(clean, bad.split(": ")[1])
    return clean


def _drop(doc: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    holder: Any = doc
    for part in parents:
        holder = holder.get(part) if isinstance(holder, dict) else None
    if isinstance(holder, dict):
        holder.pop(last, None)


def _modeled() -> list[str]:
    return list(modeled_paths())


def base_document(kf: KubeletFlags, problems: list[str]) -> dict[str, Any]:
    """Defaults, the --config file and the drop-ins, merged and defaulted."""
    if kf.kubelet_config_file:
        doc = _source_doc(kf.kubelet_config_file, "kubelet config file", problems) or {}
        loader.resolve_relative_paths(doc, os.path.dirname(os.path.abspath(kf.kubelet_config_file)))
        doc = loader.set_defaults(doc, from_file=True)
    else:
        # This kubelet's defaults are the v1beta1 ones even without a file
        # (docs/configuration.md: not upstream's open legacy flag defaults).
        doc = loader.set_defaults(encode(KubeletConfiguration()), from_file=False)
    if kf.kubelet_dropin_config_directory:
        files, walk_problems = loader.dropin_files(kf.kubelet_dropin_config_directory)
        problems.extend(walk_problems)
        for path in files:
            dropin = _source_doc(path, "kubelet drop-in config file", problems)
            if dropin is not None:
                doc = loader.merge_patch(doc, dropin)
        doc = loader.set_defaults(doc, from_file=False)
    return doc


def apply_flags(doc: dict[str, Any], parsed: ParsedArgs) -> dict[str, Any]:
    """The command line over the document: each flag replaces its field, except
    feature gates, which merge per gate over the file's."""
    out = dict(doc)
    for path, value in flag_overlay(parsed).items():
        if path == "featureGates":
            value = {**(out.get("featureGates") or {}), **value}
        holder = out
        *parents, last = path.split(".")
        for part in parents:
            nxt = holder.get(part)
            holder[part] = dict(nxt) if isinstance(nxt, dict) else {}
            holder = holder[part]
        holder[last] = value
    return out


def load(parsed: ParsedArgs, kf: KubeletFlags) -> Loaded:
    problems: list[str] = []
    doc = apply_flags(base_document(kf, problems), parsed)
    cfg, failed = decode(doc)
    # Fields that did not convert were reported by the file's own check;
    # anything else that failed (the merge of drop-ins) is reported here.
    reported = " ".join(problems)
    problems += [f"{p}: {why}" for p, why in failed.items() if f" {p}: " not in reported]
    if kf.seccomp_default:
        cfg.seccomp_default = True  # upstream ORs the flag with the field
    doc = document(cfg, doc)
    loaded = Loaded(cfg, doc, problems=problems)
    _judge(loaded, parsed)
    return loaded


def _judge(loaded: Loaded, parsed: ParsedArgs) -> None:
    cfg, doc = loaded.config, loaded.document
    loaded.problems += validate_kubelet_configuration(cfg)
    gates = dict(cfg.feature_gates)
    bad_gates = gate_problems(gates)
    loaded.problems += [f"invalid configuration: featureGates: {p}" for p in bad_gates]
    loaded.warnings += parsed.deprecation_warnings()
    if "pod-infra-container-image" in parsed.given():
        loaded.warnings.append(
            "--pod-infra-container-image will not be pruned by the image garbage collector in "
            "kubelet and should also be set in the remote runtime"
        )
    loaded.warnings += gate_set_warnings(gates)
    for report in (
        account.field_report(doc),
        account.flag_report(parsed.given()),
    ):
        loaded.warnings += report[0]
        loaded.problems += report[1]
    if not bad_gates:
        fg = FeatureGate(gates)
        w, p = account.gate_report({n: fg.value(n) for n in _gate_names()}, gates)
        loaded.warnings += w
        loaded.problems += p


def _gate_names() -> list[str]:
    return list(upstream.gates())
