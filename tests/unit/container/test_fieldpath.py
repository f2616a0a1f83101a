"""Downward API field and resource values, cases from upstream's behaviour."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubelet.fieldpath import (
    extract_field_path,
    extract_resource_value,
    format_map,
    pod_field_value,
    pod_level_allocatable,
    sort_pod_ips,
    split_maybe_subscripted_path,
)


def _pod(**meta: Any) -> dict[str, Any]:
    return {"metadata": meta, "spec": {"containers": []}}


@pytest.mark.parametrize(
    ("path", "meta", "want"),
    [
        ("metadata.namespace", {"namespace": "object-namespace"}, "object-namespace"),
        ("metadata.name", {"name": "object-name"}, "object-name"),
        ("metadata.uid", {"uid": "b70b3269-858e-12a8"}, "b70b3269-858e-12a8"),
        ("metadata.labels", {"labels": {"key": "value"}}, 'key="value"'),
        ("metadata.labels", {"labels": {"key": "value\n"}}, 'key="value\\n"'),
        ("metadata.labels", {}, ""),
        ("metadata.annotations", {"annotations": {"builder": "john-doe"}}, 'builder="john-doe"'),
        (
            "metadata.annotations['spec.pod.beta.kubernetes.io/statefulset-index']",
            {"annotations": {"spec.pod.beta.kubernetes.io/statefulset-index": "1"}},
            "1",
        ),
        # Annotation keys are validated lower-cased, so capitals are fine.
        ("metadata.annotations['Www.k8s.io/test']", {"annotations": {"Www.k8s.io/test": "1"}}, "1"),
        ("metadata.labels['something']", {"labels": {"something": "label value"}}, "label value"),
        ("metadata.labels['absent']", {"labels": {"something": "x"}}, ""),
    ],
)
def test_extract_field_path(path: str, meta: dict[str, Any], want: str) -> None:
    assert extract_field_path(_pod(**meta), path) == want


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("metadata.whoops", "unsupported fieldPath: metadata.whoops"),
        ("spec.nodeName", "unsupported fieldPath: spec.nodeName"),
        ("metadata.annotations['invalid~key']", "invalid key subscript in metadata.annotations['invalid~key']: name part must consist of alphanumeric characters"),
        ("metadata.labels['Www.k8s.io/test']", "invalid key subscript in metadata.labels['Www.k8s.io/test']: prefix part a lowercase RFC 1123 subdomain"),
        ("metadata.labels['']", "invalid key subscript in metadata.labels['']: name part must be non-empty;name part must consist of"),
        ("metadata.notexisting['something']", "fieldPath \"metadata.notexisting['something']\" does not support subscript"),
    ],
)  # fmt: skip
def test_extract_field_path_errors(path: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        extract_field_path(_pod(annotations={"foo": "bar"}), path)
    assert str(err.value).startswith(message)


def test_format_map_sorted_and_go_quoted() -> None:
    m = {"b": 'say "hi"\\', "a": "tab\there", "c": "\x01\x7f", "d": "ünï ✓", "e": "\u2028"}
    assert format_map(m) == (
        'a="tab\\there"\nb="say \\"hi\\"\\\\"\nc="\\x01\\x7f"\nd="ünï ✓"\ne="\\u2028"'
    )


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("metadata.annotations['key']", ("metadata.annotations", "key", True)),
        ("metadata.annotations['a[b']c']", ("metadata.annotations", "a[b']c", True)),
        ("metadata.labels['['key']", ("metadata.labels", "['key", True)),
        ("metadata.labels['key']']", ("metadata.labels", "key']", True)),
        ("metadata.labels['']", ("metadata.labels", "", True)),
        ("metadata.labels[' ']", ("metadata.labels", " ", True)),
        ("metadata.labels[ 'key' ]", ("metadata.labels[ 'key' ]", "", False)),
        ("metadata.labels[]", ("metadata.labels[]", "", False)),
        ("metadata.labels[']", ("metadata.labels[']", "", False)),
        ("['key']", ("['key']", "", False)),
        ("metadata.labels", ("metadata.labels", "", False)),
    ],
)
def test_split_maybe_subscripted_path(path: str, want: tuple[str, str, bool]) -> None:
    assert split_maybe_subscripted_path(path) == want


_FULL_POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "1"}},
    "spec": {"nodeName": "node-1", "serviceAccountName": "sa", "restartPolicy": "Always"},
}


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ({"fieldPath": "metadata.name"}, "p"),
        ({"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "ns"),
        ({"fieldPath": "metadata.uid"}, "u1"),
        ({"fieldPath": "metadata.labels['a']"}, "1"),
        ({"fieldPath": "metadata.labels"}, 'a="1"'),
        ({"fieldPath": "spec.nodeName"}, "node-1"),
        ({"fieldPath": "spec.host"}, "node-1"),  # old clients' name for nodeName
        ({"fieldPath": "spec.serviceAccountName"}, "sa"),
        ({"fieldPath": "status.hostIP"}, "10.0.0.1"),
        ({"fieldPath": "status.hostIPs"}, "10.0.0.1,fd00::1"),
        ({"fieldPath": "status.podIP"}, "10.1.0.5"),
        ({"fieldPath": "status.podIPs"}, "10.1.0.5,fd01::5"),
    ],
)
def test_pod_field_value(ref: dict[str, str], want: str) -> None:
    got = pod_field_value(_FULL_POD, ref, ["10.0.0.1", "fd00::1"], ["10.1.0.5", "fd01::5"])
    assert got == want


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"apiVersion": "v2", "fieldPath": "metadata.name"}, "unsupported pod version: v2"),
        ({"fieldPath": "metadata.foo"}, "field label not supported: metadata.foo"),
        ({"fieldPath": "spec.containers['x']"}, "field label does not support subscript: spec.containers['x']"),
        # Accepted labels the kubelet cannot resolve.
        ({"fieldPath": "spec.restartPolicy"}, "unsupported fieldPath: spec.restartPolicy"),
        ({"fieldPath": "status.phase"}, "unsupported fieldPath: status.phase"),
        ({"fieldPath": "status.hostIP"}, "host IP unknown; known addresses: []"),
    ],
)  # fmt: skip
def test_pod_field_value_errors(ref: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        pod_field_value(_FULL_POD, ref, [], [])


def test_pod_ips_without_any() -> None:
    assert pod_field_value(_FULL_POD, {"fieldPath": "status.podIP"}, ["10.0.0.1"], []) == ""
    assert pod_field_value(_FULL_POD, {"fieldPath": "status.podIPs"}, ["10.0.0.1"], []) == ""


@pytest.mark.parametrize(
    ("pod_ips", "node_ips", "want"),
    [
        (["fd01::5", "10.1.0.5"], [], ["10.1.0.5", "fd01::5"]),
        (["fd01::5", "10.1.0.5"], ["10.0.0.1"], ["10.1.0.5", "fd01::5"]),
        (["10.1.0.5", "fd01::5"], ["fd00::1"], ["fd01::5", "10.1.0.5"]),
        (["10.1.0.5", "10.1.0.6"], [], ["10.1.0.5"]),
        (["fd01:0:0::5"], [], ["fd01::5"]),  # re-stringified
        (["bogus", "10.1.0.5"], [], ["10.1.0.5"]),
        ([], [], []),
    ],
)
def test_sort_pod_ips(pod_ips: list[str], node_ips: list[str], want: list[str]) -> None:
    assert sort_pod_ips(pod_ips, node_ips) == want


def _res_pod(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    c = {"name": "c", "resources": {"limits": limits, "requests": requests or {}}}
    init = {"name": "init", "resources": {"limits": {"cpu": "3"}}}
    return {"metadata": {"name": "p"}, "spec": {"containers": [c], "initContainers": [init]}}


_ALLOC = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi", "hugepages-2Mi": "1Gi"}


@pytest.mark.parametrize(
    ("resource", "divisor", "limits", "requests", "want"),
    [
        ("limits.cpu", None, {"cpu": "1250m"}, {}, "2"),  # rounded up
        ("limits.cpu", "1m", {"cpu": "1250m"}, {}, "1250"),
        ("limits.cpu", "0", {"cpu": "2"}, {}, "2"),  # a zero divisor means 1
        ("limits.cpu", "100m", {"cpu": "250m"}, {}, "3"),
        ("limits.cpu", None, {"cpu": "0.1m"}, {}, "1"),  # milli value rounds up first
        ("requests.cpu", "1m", {}, {"cpu": "250m"}, "250"),
        ("requests.cpu", None, {}, {}, "0"),  # requests never default
        ("limits.memory", None, {"memory": "64Mi"}, {}, "67108864"),
        ("limits.memory", "1Mi", {"memory": "64Mi"}, {}, "64"),
        ("limits.memory", "1Gi", {"memory": "1500Mi"}, {}, "2"),
        ("limits.memory", "1k", {"memory": "1500"}, {}, "2"),
        ("requests.memory", "1Mi", {}, {"memory": "32Mi"}, "32"),
        ("limits.ephemeral-storage", "1Gi", {"ephemeral-storage": "2Gi"}, {}, "2"),
        ("requests.ephemeral-storage", None, {}, {"ephemeral-storage": "1k"}, "1000"),
        ("limits.hugepages-2Mi", "1Mi", {"hugepages-2Mi": "4Mi"}, {}, "4"),
        ("requests.hugepages-1Gi", "1Gi", {}, {"hugepages-1Gi": "2Gi"}, "2"),
        # Unset limits fall back to node allocatable, hugepages do not.
        ("limits.cpu", None, {}, {}, "4"),
        ("limits.cpu", None, {"cpu": "0"}, {}, "4"),
        ("limits.memory", "1Gi", {}, {}, "8"),
        ("limits.ephemeral-storage", "1Gi", {}, {}, "100"),
        ("limits.hugepages-2Mi", None, {}, {}, "0"),
    ],
)
def test_extract_resource_value(
    resource: str, divisor: str | None, limits: dict[str, Any], requests: dict[str, Any], want: str
) -> None:
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    assert extract_resource_value(ref, _res_pod(limits, requests), "c", _ALLOC) == want


def test_extract_resource_value_init_container_and_errors() -> None:
    pod = _res_pod({})
    assert extract_resource_value({"resource": "limits.cpu"}, pod, "init", {}) == "3"
    assert extract_resource_value({"resource": "limits.memory"}, pod, "init", {}) == "0"
    with pytest.raises(ValueError, match=r"^container nope not found$"):
        extract_resource_value({"resource": "limits.cpu"}, pod, "nope", _ALLOC)
    with pytest.raises(ValueError, match=r"^unsupported container resource : limits.pods$"):
        extract_resource_value({"resource": "limits.pods"}, pod, "c", _ALLOC)
    with pytest.raises(ValueError, match=r"^unsupported container resource : cpu$"):
        extract_resource_value({"resource": "cpu"}, pod, "c", _ALLOC)


def test_pod_level_allocatable() -> None:
    pod = {"spec": {"resources": {"limits": {"cpu": "1250m", "ephemeral-storage": "1Gi"}}}}
    got = pod_level_allocatable(pod, {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "9Gi"})
    # Only cpu and memory are pod-level resources; a missing node value stays missing.
    assert got == {"cpu": "1250m", "memory": "8Gi", "ephemeral-storage": "9Gi"}
    assert pod_level_allocatable(pod, {"memory": "8Gi"}) == {"memory": "8Gi"}
    assert pod_level_allocatable({"spec": {}}, {"cpu": "4"}) == {"cpu": "4"}
