"""Fuzzed static pod manifests (file and URL sources): a bad manifest is a
ManifestError with a message, never another exception, and a good one becomes a
pod that can be served as JSON (the /pods endpoint, the mirror pod)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from kubelet.config.common import ManifestError, apply_defaults, decode_manifest
from kubelet.config.file import read_pods

# No explain phase: it traces every line, and one 200,000-value walk under a
# tracer takes minutes.
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["c", "busybox:1.36", "Always", "default", "web", ""]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _good() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


PATHS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "name"),
    ("spec", "containers", 0, "image"),
    ("spec", "containers", 0, "command"),
    ("spec", "initContainers"),
    ("spec", "restartPolicy"),
    ("spec", "tolerations"),
    ("spec", "securityContext"),
    ("kind",),
    ("items",),
]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        if isinstance(doc, dict) and isinstance(p, str):
            doc = doc.get(p)
        elif isinstance(doc, list) and isinstance(p, int) and p < len(doc):
            doc = doc[p]
        else:
            return
    last = path[-1]
    if isinstance(doc, dict) and isinstance(last, str):
        doc[last] = value
    elif isinstance(doc, list) and isinstance(last, int) and last < len(doc):
        doc[last] = value


def _check(data: bytes) -> None:
    """The property: ManifestError or pods that serialise; and quickly."""
    start = time.monotonic()
    try:
        docs = decode_manifest(data)
        for doc in docs:
            pod = apply_defaults(doc, "/etc/kubernetes/manifests/x.yaml", "file", "node-a")
            orjson.dumps(pod)
    except ManifestError as err:
        assert str(err)
    assert time.monotonic() - start < 5, "a manifest took seconds to decode"


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), json_values), max_size=4))
@example([(("spec", "tolerations"), None)])
@example([(("spec", "tolerations"), [-(2**63) - 1])])
def test_structured_manifests(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    doc = _good()
    for path, value in edits:
        _set(doc, path, value)
    _check(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _jsonable(doc) else b"{}")
    _check(yaml.safe_dump(doc).encode())


def _jsonable(doc: Any) -> bool:
    try:
        orjson.dumps(doc)
        return True
    except TypeError:
        return False


YAML_SPECIALS = [
    # Keys that are not strings.
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i, 1: 2}]}\n",
    b"kind: Pod\nmetadata: {name: web, labels: {? [a, b] : c}}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web, annotations: {true: yes}}\nspec: {containers: [{name: c, image: i}]}\n",
    # YAML types JSON does not have: timestamps, binary, sets.
    b"kind: Pod\nmetadata: {name: web, creationTimestamp: 2020-01-01}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web, labels: {a: !!binary aGVsbG8=}}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web, labels: !!set {a, b}}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}], nodeSelector: {a: .nan}}\n",
    # Aliases: a small file that is huge once expanded.
    b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    b"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
    b"kind: Pod\nmetadata: {name: web, annotations: {x: *h}}\nspec: {containers: [{name: c, image: i}]}\n",
    # A pod that contains itself.
    b"kind: Pod\nmetadata: &m {name: web, labels: {self: *m}}\nspec: {containers: [{name: c, image: i}]}\n",
    # Deep nesting.
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}], x: "
    + b"[" * 5000
    + b"]" * 5000
    + b"}\n",
    b"kind: List\nitems: [1, 2]\n",
    b"kind: PodList\nitems: {a: b}\n",
    b"kind: PodList\nitems: [{kind: Pod, metadata: [], spec: {}}]\n",
    b"--- \n...\n---\nkind: Pod\n",
    b"\xff\xfe\x00k",
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}], restartPolicy: [Always]}\n",
    b"kind: Pod\nmetadata: {name: web, namespace: 7}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web, annotations: [a]}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web, labels: x}\nspec: {containers: [{name: c, image: i}]}\n",
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}], tolerations: 3}\n",
    b"kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}], initContainers: [{name: d, image: j}, 3]}\n",
]


@pytest.mark.parametrize("data", YAML_SPECIALS, ids=range(len(YAML_SPECIALS)))
def test_yaml_specials(data: bytes) -> None:
    _check(data)


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_arbitrary_bytes(data: bytes) -> None:
    _check(data)


def test_a_bad_file_does_not_hide_the_good_ones(tmp_path: Path) -> None:
    good = yaml.safe_dump(_good()).encode()
    (tmp_path / "00-good.yaml").write_bytes(good)
    for i, data in enumerate(YAML_SPECIALS):
        (tmp_path / f"{i + 1:02d}.yaml").write_bytes(data)
    pods, errors = read_pods(str(tmp_path), "node-a")
    assert any(p["metadata"]["name"] == "web-node-a" for p in pods)
    for e in errors:
        assert "invalid manifest: " not in e, f"an exception the parser did not expect: {e}"
        assert "Traceback" not in e
