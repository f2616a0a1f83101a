"""The fields of a pod's spec that the pinned Kubernetes API declares.

A field this kubelet's API version does not know (an API server newer than
it, or a typo in a static pod's manifest, which the decoder would drop) is
named rather than ignored: `unknown_fields` walks a spec against the field
tree of core/v1 PodSpec that hack/podfields/gen.sh takes from k8s.io/api by
reflection (data/podspec_fields.json). Types map JSON names to "" (a leaf),
a struct's name, or that with "[]" (a list) or "{}" (a map) in front.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

_DATA = Path(__file__).parent / "data" / "podspec_fields.json"
_LIST, _MAP = "[]", "{}"


@functools.cache
def _tree() -> tuple[str, dict[str, dict[str, str]], str]:
    doc = json.loads(_DATA.read_text())
    return doc["root"], doc["types"], str(doc.get("source", ""))


def api_source() -> str:
    """Where the field tree came from (module and version)."""
    return _tree()[2]


def unknown_fields(spec: Mapping[str, object], prefix: str = "spec") -> list[str]:
    """Paths of the keys in `spec` that core/v1 PodSpec does not declare."""
    root, types, _ = _tree()
    return list(_walk(spec, root, prefix, types))


def _walk(
    value: object, kind: str, path: str, types: Mapping[str, Mapping[str, str]]
) -> Iterator[str]:
    if not kind:
        return
    if kind.startswith(_LIST):
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _walk(item, kind[2:], f"{path}[{_label(item, i)}]", types)
        return
    if kind.startswith(_MAP):
        if isinstance(value, Mapping):
            for k, item in value.items():
                yield from _walk(item, kind[2:], f"{path}[{k}]", types)
        return
    if not isinstance(value, Mapping):
        return  # a wrong type is the API server's or the decoder's to refuse
    fields = types.get(kind, {})
    for key, item in value.items():
        if key not in fields:
            yield f"{path}.{key}"
        else:
            yield from _walk(item, fields[key], f"{path}.{key}", types)


def _label(item: object, i: int) -> str:
    """A list item by its name where it has one (containers, volumes), as the
    other field paths of the warning name them."""
    name = item.get("name") if isinstance(item, Mapping) else None
    return name if isinstance(name, str) and name else str(i)
