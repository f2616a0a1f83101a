"""The configuration document: the `--config` file and `--config-dir` drop-ins
read into one v1beta1 JSON object, defaulted as the upstream kubelet does
(kubeletconfig/configfiles and mergeKubeletConfigurations in
cmd/kubelet/app/server.go).

The document holds every upstream field, implemented or not, so /configz can
serve it whole and the account can judge each field's value. Every problem in
every file is collected; nothing stops at the first.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import Any

import yaml

from kubelet.apis.config import upstream
from kubelet.apis.config.types import API_VERSION, KIND
from kubelet.util.duration import parse_duration

Doc = dict[str, Any]

DROPIN_SUFFIX = ".conf"

# This kubelet's own fields (not in the upstream type): path -> (default, zero means default).
EXTENSION_FIELDS: dict[str, tuple[Any, bool]] = {"plegRelistPeriod": ("1s", True)}

# cmd/kubelet/app.loadConfigFile: evictionHard when the file has none (Linux).
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
}


def read_yaml(path: str, what: str) -> tuple[Doc | None, list[str]]:
    """A YAML/JSON file holding a KubeletConfiguration object, or the problems."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        return None, [f"failed to read {what} {path!r}: {err}"]
    if not raw.strip():
        return None, [f"{what} {path!r} was empty"]
    try:
        # libyaml's loader when built in: the pure-Python one recurses once
        # per nesting level and fails deep files with RecursionError.
        loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(raw, Loader=loader)
    except yaml.YAMLError as err:
        return None, [f"failed to decode {what} {path!r}: {err}"]
    except RecursionError:
        return None, [f"failed to decode {what} {path!r}: nested too deeply"]
    if not isinstance(data, dict):
        return None, [f"{what} {path!r} must hold a KubeletConfiguration object"]
    problems = []
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        problems.append(
            f"{path}: apiVersion/kind {data.get('apiVersion')!r}/{data.get('kind')!r}: "
            f"want {API_VERSION!r}/{KIND!r}"
        )
    doc = {str(k): v for k, v in data.items() if k not in ("apiVersion", "kind")}
    return doc, problems


def resolve_relative_paths(doc: Doc, base_dir: str) -> None:
    """Paths in the --config file are relative to its directory, as upstream."""
    for path, fld in upstream.fields().items():
        if not fld.relative_path:
            continue
        parent, _, key = path.rpartition(".")
        holder = _holder(doc, parent)
        if holder is None:
            continue
        value = holder.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            holder[key] = os.path.join(base_dir, value)


def _holder(doc: Doc, parent: str) -> Doc | None:
    cur: Any = doc
    for part in filter(None, parent.split(".")):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur if isinstance(cur, dict) else None


def dropin_files(directory: str) -> tuple[list[str], list[str]]:
    """The drop-ins under `directory`: every `*.conf` file in the tree, in the
    lexical walk order of Go's filepath.WalkDir."""
    if not os.path.isdir(directory):
        return [], [
            f"failed to walk through kubelet dropin directory {directory!r}: not a directory"
        ]
    return list(_walk(directory)), []


def _walk(directory: str) -> Iterator[str]:
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            yield from _walk(path)
        elif name.endswith(DROPIN_SUFFIX) and os.path.isfile(path):
            yield path


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything
    else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ---- defaulting ----


def _is_zero(value: object, typ: str) -> bool:
    if isinstance(value, bool):
        return value is False
    if (isinstance(value, int | float) and value == 0) or value == "":
        return True
    if typ in ("duration", "duration_or_ns") and isinstance(value, str):
        try:
            return parse_duration(value) == 0
        except ValueError:
            return False
    return False


def set_defaults(doc: Doc, *, from_file: bool) -> Doc:
    """Upstream's SetDefaults over the document: absent (or null) fields get
    their default; non-pointer fields also when they hold the zero value,
    which kubeadm writes for many (`0s`). With `from_file`, evictionHard as
    loadConfigFile fills it in."""
    out = copy.deepcopy(doc)
    for path, fld in upstream.fields().items():
        # "never" with a default: Go's zero value, which its JSON still carries.
        if fld.default is None:
            continue
        parent, _, key = path.rpartition(".")
        holder = _holder(out, parent) if parent else out
        if holder is None:
            holder = _make_holder(out, parent)
        value = holder.get(key)
        if value is None or (fld.default_when == "zero" and _is_zero(value, fld.type)):
            holder[key] = copy.deepcopy(fld.default)
    for path, (default, zero_default) in EXTENSION_FIELDS.items():
        value = out.get(path)
        if value is None or (zero_default and _is_zero(value, "duration")):
            out[path] = default
    hard = out.get("evictionHard")
    if hard is None:
        out["evictionHard"] = dict(DEFAULT_EVICTION_HARD)
    elif from_file and out.get("mergeDefaultEvictionSettings") and isinstance(hard, dict):
        out["evictionHard"] = {**DEFAULT_EVICTION_HARD, **hard}
    return out


def _make_holder(doc: Doc, parent: str) -> Doc:
    cur = doc
    for part in parent.split("."):
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    return cur


# ---- checking the document against the upstream type ----

_OBJECTS: set[str] = set()


def _object_paths() -> set[str]:
    if not _OBJECTS:
        for path in upstream.fields():
            parts = path.split(".")
            _OBJECTS.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return _OBJECTS


def check_document(
    doc: Doc, source: str, skip: frozenset[str] = frozenset()
) -> tuple[Doc, list[str]]:
    """Unknown fields and values of the wrong JSON type, each with its path, and
    the document without them (so a bad value never travels further). Paths in
    `skip` are type-checked by the caller (the typed decode)."""
    problems: list[str] = []
    return _check(doc, "", source, skip, problems), problems


def _check(obj: Doc, prefix: str, source: str, skip: frozenset[str], problems: list[str]) -> Doc:
    fields = upstream.fields()
    clean: Doc = {}
    for key, value in obj.items():
        path = prefix + str(key)
        if path in fields or path in EXTENSION_FIELDS:
            why = ""
            if path not in skip and value is not None:
                why = type_problem(value, fields[path].type if path in fields else "duration")
            if why:
                problems.append(f"{source}: {path}: {why}")
            else:
                clean[str(key)] = value
        elif path in _object_paths():
            if isinstance(value, dict):
                clean[str(key)] = _check(value, path + ".", source, skip, problems)
            elif value is not None:
                problems.append(f"{source}: {path}: want an object, got {_short(value)}")
        else:
            problems.append(f'{source}: {path}: unknown field "{path}"')
    return clean


def _short(value: object) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "a value nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


_SCALARS: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "string": (str,),
    "int32": (int,),
    "int64": (int,),
    "int": (int,),
    "float64": (int, float),
    "quantity": (str, int, float),
}


def type_problem(value: object, typ: str) -> str:
    """Why `value` is not a JSON value of the Go type named `typ`, or ""."""
    if typ in _SCALARS:
        ok = isinstance(value, _SCALARS[typ]) and not (isinstance(value, bool) and typ != "bool")
        return "" if ok else f"want {typ}, got {_short(value)}"
    if typ in ("duration", "duration_or_ns"):
        if typ == "duration_or_ns" and isinstance(value, int) and not isinstance(value, bool):
            return ""
        if not isinstance(value, str):
            return f'want a duration string such as "1m30s", got {_short(value)}'
        try:
            parse_duration(value)
        except ValueError as err:
            return str(err)
        return ""
    if typ.startswith("[]"):
        if not isinstance(value, list):
            return f"want a list, got {_short(value)}"
        for item in value:
            why = type_problem(item, typ[2:])
            if why:
                return f"item: {why}"
        return ""
    if typ.startswith("map["):
        if not isinstance(value, dict):
            return f"want a map, got {_short(value)}"
        elem = typ[typ.index("]") + 1 :]
        for item in value.values():
            why = type_problem(item, elem)
            if why:
                return f"value: {why}"
        return ""
    if typ == "object":
        return "" if isinstance(value, dict) else f"want an object, got {_short(value)}"
    return ""
