"""/configz serves the v1beta1 document a Go client decodes: every field
upstream declares as an integer holds an integer (a float such as 50.0 does
not decode into an int32), and every scalar field has the JSON type of its Go
type."""

from __future__ import annotations

from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.apis.config.loader import type_problem
from kubelet.apis.config.upstream import fields
from kubelet.apis.config.v1beta1 import document

SCALARS = ("bool", "string", "int32", "int64", "int", "float64")


def _at(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def test_every_scalar_field_has_its_go_json_type() -> None:
    doc = document(KubeletConfiguration())
    wrong = {}
    for path, f in fields().items():
        value = _at(doc, path)
        if value is None or f.type not in SCALARS:
            continue
        why = type_problem(value, f.type)
        if why:
            wrong[path] = why
    assert wrong == {}


def test_the_qps_fields_are_integers() -> None:
    doc = document(KubeletConfiguration())
    for path in ("kubeAPIQPS", "eventRecordQPS", "registryPullQPS"):
        assert type(doc[path]) is int, path
