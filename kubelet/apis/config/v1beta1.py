"""The typed KubeletConfiguration from a v1beta1 document, and back.

loader.py builds the document (files, drop-ins, defaults); flags are applied
to it; decode() gives the fields this kubelet models as Python values, and
document() gives what /configz serves: the whole upstream object with the
modeled fields as they are in force.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import orjson

from kubelet.apis.config.types import API_VERSION, KIND, KubeletConfiguration, json_name
from kubelet.util.duration import format_duration, parse_duration


class ConfigError(Exception):
    """A configuration that cannot be used; .problems lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def modeled_paths(obj: Any = None, prefix: str = "") -> dict[str, tuple[Any, str]]:
    """JSON path -> (type hint, kind) of every leaf KubeletConfiguration models."""
    obj = KubeletConfiguration() if obj is None else obj
    hints = typing.get_type_hints(type(obj))
    out: dict[str, tuple[Any, str]] = {}
    for fl in dataclasses.fields(obj):
        path = prefix + json_name(fl)
        value = getattr(obj, fl.name)
        if dataclasses.is_dataclass(value):
            out.update(modeled_paths(value, path + "."))
        else:
            out[path] = (hints[fl.name], str(fl.metadata.get("kind", "")))
    return out


_MODELED = modeled_paths()


def check_modeled(doc: dict[str, Any], source: str) -> list[str]:
    """Type problems of the modeled fields a (file's) document sets."""
    problems = []
    for path, (hint, kind) in _MODELED.items():
        value = _get(doc, path)
        if value is None:
            continue
        try:
            convert(value, hint, kind)
        except (TypeError, ValueError) as err:
            problems.append(f"{source}: {path}: {err}")
    return problems


def _get(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def decode(doc: dict[str, Any]) -> tuple[KubeletConfiguration, dict[str, str]]:
    """The typed view of a (defaulted) document: every field it models, from
    the document. Returns the config and, by path, the fields that could not
    be converted (they keep their defaults so validation can still run)."""
    cfg = KubeletConfiguration()
    failed: dict[str, str] = {}
    _decode_into(cfg, doc, "", failed)
    return cfg, failed


def _decode_into(obj: Any, data: Any, prefix: str, failed: dict[str, str]) -> None:
    if not isinstance(data, dict):
        return
    hints = typing.get_type_hints(type(obj))
    for fl in dataclasses.fields(obj):
        path = prefix + json_name(fl)
        value = data.get(json_name(fl))
        current = getattr(obj, fl.name)
        if dataclasses.is_dataclass(current):
            _decode_into(current, value, path + ".", failed)
            continue
        if value is None:
            continue
        try:
            setattr(obj, fl.name, convert(value, hints[fl.name], fl.metadata.get("kind", "")))
        except (TypeError, ValueError) as err:
            failed[path] = str(err)


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
            inner = encode(value)
            if inner or not all(f.default is None for f in dataclasses.fields(value)):
                out[json_name(fl)] = inner  # a struct of unset pointers is left out, as Go's
        elif fl.metadata.get("kind") in ("duration", "duration_or_ns"):
            out[json_name(fl)] = format_duration(value)
        elif value is not None:
            out[json_name(fl)] = value
    return out


def encode_json(cfg: KubeletConfiguration) -> bytes:
    doc = {"kind": KIND, "apiVersion": API_VERSION, **encode(cfg)}
    return json.dumps(doc, sort_keys=False).encode()


def document(cfg: KubeletConfiguration, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole v1beta1 object in force: `base` (the effective document, which
    also holds the fields this kubelet does not model) with every modeled field
    as `cfg` has it now. What /configz serves."""
    return _overlay(base or {}, encode(cfg))


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "featureGates":
            # Nested structs merge; maps of the modeled type (evictionHard, ...)
            # are whole values and replace.
            out[key] = _overlay(out[key], value) if _is_struct(key) else value
        else:
            out[key] = value
    return out


def _is_struct(key: str) -> bool:
    return key in ("authentication", "authorization", "logging")
