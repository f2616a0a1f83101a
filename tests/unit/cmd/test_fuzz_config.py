"""Fuzzed KubeletConfiguration files: every bad file is a UsageError listing its
problems (the command prints them and exits 1), never another exception."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kubelet.apis.config.types import API_VERSION, KIND, KubeletConfiguration, json_name
from kubelet.cmd.kubelet import UsageError, build_server

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)


def _paths(obj: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for fl in dataclasses.fields(obj):
        p = (*prefix, json_name(fl))
        out.append(p)
        v = getattr(obj, fl.name)
        if dataclasses.is_dataclass(v):
            out.extend(_paths(v, p))
    return out


PATHS = _paths(KubeletConfiguration())

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "1s", "-1s", "0s", "1e400s", "9999999999999h", "1.5", "100Mi", "10%", "-5%",
            "memory.available<100Mi", "json", "text", "Webhook", "AlwaysAllow", "none",
            "static", "systemd", "cgroupfs", "0.0.0.0", "::1", "unix:///x", "", "nan",
        ]
    ),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        nxt = doc.get(p)
        if not isinstance(nxt, dict):
            nxt = doc[p] = {}
        doc = nxt
    doc[path[-1]] = value


def _build(path: Path) -> None:
    try:
        server, _, code = build_server(["--config", str(path)])
    except UsageError as err:
        assert err.problems and all(isinstance(p, str) and p for p in err.problems)
        return
    assert code is None and server is not None
    # A config that loads is one the kubelet can serve on /configz.
    from kubelet.apis.config.v1beta1 import encode

    orjson.dumps(encode(server.config))


@FUZZ
@given(
    edits=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=5),
    as_json=st.booleans(),
)
def test_fuzzed_fields(tmp_path_factory: Any, edits: list[Any], as_json: bool) -> None:
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    for path, value in edits:
        _put(doc, path, value)
    f = tmp_path_factory.mktemp("cfg") / "config.yaml"
    try:
        data = orjson.dumps(doc) if as_json else yaml.safe_dump(doc).encode()
    except TypeError:
        data = yaml.safe_dump(doc).encode()
    f.write_bytes(data)
    _build(f)


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_arbitrary_files(tmp_path_factory: Any, data: bytes) -> None:
    f = tmp_path_factory.mktemp("cfg") / "config.yaml"
    f.write_bytes(
        b"apiVersion: " + API_VERSION.encode() + b"\nkind: " + KIND.encode() + b"\n" + data
    )
    _build(f)
    f.write_bytes(data)
    _build(f)


SPECIALS = [
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {1: 2}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: [a]\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates: {A: maybe}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: !!binary aGk=\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: !!set {a}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: 2020-01-01\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nx: " + b"[" * 3000 + b"]" * 3000 + b"\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging: {format: xml}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 1e400\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: .inf\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsystemReserved: {cpu: 1e999}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 1180591620717411303424\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging: {options: {json: {a: !!binary aGk=}}}\n",
    b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging: {options: {json: {a: 1180591620717411303424}}}\n",
    b"---\n---\n",
    b"- a\n- b\n",
]  # fmt: skip


@pytest.mark.parametrize("data", SPECIALS, ids=range(len(SPECIALS)))
def test_special_files(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "config.yaml"
    f.write_bytes(data)
    _build(f)


def test_the_command_lists_problems_and_exits_1(tmp_path: Path) -> None:
    f = tmp_path / "config.yaml"
    f.write_bytes(SPECIALS[0] + b"port: .inf\nlogging: {format: xml}\n")
    p = subprocess.run(
        [sys.executable, "-m", "kubelet", "--config", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert "Error:" in p.stderr
