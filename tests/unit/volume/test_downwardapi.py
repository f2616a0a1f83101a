"""The downwardAPI volume plugin."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest

from kubelet.volume import VolumeError
from kubelet.volume.atomic_writer import DATA_DIR
from kubelet.volume.downwardapi import DownwardAPIPlugin
from tests.unit.volume.helpers import read


def pod(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "prod",
            "uid": "uid-9",
            "labels": labels if labels is not None else {"app": "web", "tier": "front"},
            "annotations": {"note": "a\nb"},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
                }
            ]
        },
    }


def volume(*items: dict[str, Any], **source: Any) -> dict[str, Any]:
    return {"name": "info", "downwardAPI": {"items": list(items), **source}}


def field(path: str, fp: str, **kw: Any) -> dict[str, Any]:
    return {"path": path, "fieldRef": {"apiVersion": "v1", "fieldPath": fp}, **kw}


def res(path: str, resource: str, divisor: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"containerName": "c", "resource": resource}
    if divisor:
        ref["divisor"] = divisor
    return {"path": path, "resourceFieldRef": ref}


async def test_fields_and_resources(tmp_path: Any) -> None:
    d = str(tmp_path / "info")
    plugin = DownwardAPIPlugin(lambda: {"cpu": "4", "memory": "8Gi"})
    assert plugin.name == "kubernetes.io/downward-api" and plugin.requires_remount
    spec = volume(
        field("name", "metadata.name"),
        field("ns", "metadata.namespace"),
        field("uid", "metadata.uid"),
        field("labels", "metadata.labels", mode=0o600),
        field("app", "metadata.labels['app']"),
        field("annotations", "metadata.annotations"),
        res("mem_limit", "limits.memory", "1Mi"),
        res("cpu_limit", "limits.cpu"),  # no limit: node allocatable
        res("cpu_request", "requests.cpu", "1m"),
        defaultMode=0o444,
    )
    assert plugin.can_support(spec)
    await plugin.set_up(pod(), spec, d)
    assert read(f"{d}/name") == "web" and read(f"{d}/ns") == "prod" and read(f"{d}/uid") == "uid-9"
    assert read(f"{d}/labels") == 'app="web"\ntier="front"'
    assert read(f"{d}/app") == "web"
    assert read(f"{d}/annotations") == 'note="a\\nb"'
    assert read(f"{d}/mem_limit") == "64"
    assert read(f"{d}/cpu_limit") == "4"
    assert read(f"{d}/cpu_request") == "250"
    assert stat.S_IMODE(os.stat(f"{d}/labels").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(f"{d}/name").st_mode) == 0o444


async def test_label_change_rewrites_only_when_changed(tmp_path: Any) -> None:
    d = str(tmp_path / "info")
    plugin = DownwardAPIPlugin()
    spec = volume(field("labels", "metadata.labels"), field("name", "metadata.name"))
    await plugin.set_up(pod(), spec, d)
    data = os.readlink(f"{d}/{DATA_DIR}")
    await plugin.set_up(pod(), spec, d)
    assert os.readlink(f"{d}/{DATA_DIR}") == data
    await plugin.set_up(pod({"app": "web2"}), spec, d)
    assert read(f"{d}/labels") == 'app="web2"'
    assert os.readlink(f"{d}/{DATA_DIR}") != data


async def test_errors_are_aggregated(tmp_path: Any) -> None:
    d = str(tmp_path / "info")
    spec = volume(field("x", "spec.nodeName"), field("ok", "metadata.name"))
    with pytest.raises(VolumeError, match=r"^unsupported fieldPath: spec.nodeName$"):
        await DownwardAPIPlugin().set_up(pod(), spec, d)
    assert not os.path.exists(d)
    spec = volume(field("x", "spec.nodeName"), field("y", "metadata.labels['bad key']"))
    with pytest.raises(VolumeError, match=r"^\[unsupported fieldPath: spec.nodeName, invalid key"):
        await DownwardAPIPlugin().set_up(pod(), spec, d)


async def test_bad_path(tmp_path: Any) -> None:
    with pytest.raises(VolumeError, match=r"must not contain '..'"):
        await DownwardAPIPlugin().set_up(
            pod(), volume(field("../x", "metadata.name")), str(tmp_path / "info")
        )
