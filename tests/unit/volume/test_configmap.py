"""The configMap volume plugin on a fake object getter."""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

import pytest

from kubelet.volume import VolumeError
from kubelet.volume.atomic_writer import DATA_DIR
from kubelet.volume.configmap import ConfigMapPlugin
from tests.unit.volume.helpers import FakeGetter, pod, read


def volume(**source: Any) -> dict[str, Any]:
    return {"name": "cfg", "configMap": {"name": "cm", **source}}


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def getter() -> FakeGetter:
    g = FakeGetter()
    g.objects[("ns", "cm")] = {
        "metadata": {"name": "cm", "namespace": "ns"},
        "data": {"a.conf": "alpha", "b-key": "beta"},
        "binaryData": {"bin": base64.b64encode(b"\x00\xffraw").decode()},
    }
    return g


async def test_all_keys_with_default_mode(tmp_path: Any, getter: FakeGetter) -> None:
    plugin = ConfigMapPlugin(getter)
    d = str(tmp_path / "cfg")
    assert plugin.can_support(volume()) and not plugin.can_support({"name": "x", "emptyDir": {}})
    assert plugin.requires_remount and plugin.name == "kubernetes.io/configmap"
    await plugin.set_up(pod(), volume(), d)
    assert sorted(n for n in os.listdir(d) if not n.startswith("..")) == ["a.conf", "b-key", "bin"]
    assert read(f"{d}/a.conf") == "alpha" and read(f"{d}/b-key") == "beta"
    with open(f"{d}/bin", "rb") as fh:
        assert fh.read() == b"\x00\xffraw"
    assert mode(f"{d}/a.conf") == 0o644 and mode(f"{d}/bin") == 0o644
    assert os.path.islink(f"{d}/a.conf") and os.path.islink(f"{d}/{DATA_DIR}")


async def test_items_paths_and_modes(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "cfg")
    spec = volume(
        defaultMode=0o400,
        items=[
            {"key": "a.conf", "path": "etc/app/a.conf"},
            {"key": "bin", "path": "raw", "mode": 0o755},
        ],
    )
    await ConfigMapPlugin(getter).set_up(pod(), spec, d)
    assert read(f"{d}/etc/app/a.conf") == "alpha"
    assert mode(f"{d}/etc/app/a.conf") == 0o400
    assert mode(f"{d}/raw") == 0o755
    assert not os.path.lexists(f"{d}/b-key")


async def test_missing_configmap(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "cfg")
    with pytest.raises(VolumeError, match=r'^configmap "nope" not found$'):
        await ConfigMapPlugin(getter).set_up(pod(), {"name": "v", "configMap": {"name": "nope"}}, d)
    assert not os.path.exists(d)
    # Optional: an empty volume.
    await ConfigMapPlugin(getter).set_up(
        pod(), {"name": "v", "configMap": {"name": "nope", "optional": True}}, d
    )
    assert DATA_DIR in os.listdir(d)
    assert [n for n in os.listdir(d) if not n.startswith("..")] == []


async def test_missing_key(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "cfg")
    spec = volume(items=[{"key": "a.conf", "path": "a"}, {"key": "absent", "path": "x"}])
    with pytest.raises(
        VolumeError, match=r"^configmap references non-existent config key: absent$"
    ):
        await ConfigMapPlugin(getter).set_up(pod(), spec, d)
    spec["configMap"]["optional"] = True
    await ConfigMapPlugin(getter).set_up(pod(), spec, d)
    assert read(f"{d}/a") == "alpha" and not os.path.lexists(f"{d}/x")


async def test_other_errors_become_volume_errors(tmp_path: Any, getter: FakeGetter) -> None:
    getter.error = TimeoutError(
        "failed to sync configmap cache: timed out waiting for the condition"
    )
    with pytest.raises(VolumeError, match=r"failed to sync configmap cache"):
        await ConfigMapPlugin(getter).set_up(pod(), volume(optional=True), str(tmp_path / "x"))


async def test_bad_item_path(tmp_path: Any, getter: FakeGetter) -> None:
    spec = volume(items=[{"key": "a.conf", "path": "../../etc/passwd"}])
    with pytest.raises(VolumeError, match=r"must not contain '..'"):
        await ConfigMapPlugin(getter).set_up(pod(), spec, str(tmp_path / "cfg"))


async def test_update_propagates_and_unchanged_is_not_rewritten(
    tmp_path: Any, getter: FakeGetter
) -> None:
    d = str(tmp_path / "cfg")
    plugin = ConfigMapPlugin(getter)
    await plugin.set_up(pod(), volume(), d)
    data = os.readlink(f"{d}/{DATA_DIR}")
    await plugin.set_up(pod(), volume(), d)
    assert os.readlink(f"{d}/{DATA_DIR}") == data
    getter.objects[("ns", "cm")] = {"data": {"a.conf": "ALPHA", "new": "n"}}
    await plugin.set_up(pod(), volume(), d)
    assert os.readlink(f"{d}/{DATA_DIR}") != data
    assert read(f"{d}/a.conf") == "ALPHA" and read(f"{d}/new") == "n"
    assert not os.path.lexists(f"{d}/b-key") and not os.path.lexists(f"{d}/bin")


async def test_large_configmap(tmp_path: Any, getter: FakeGetter) -> None:
    big = "x" * (1024 * 1024 - 100)
    getter.objects[("ns", "cm")] = {"data": {"big": big}}
    d = str(tmp_path / "cfg")
    await ConfigMapPlugin(getter).set_up(pod(), volume(), d)
    assert os.path.getsize(f"{d}/big") == len(big)


async def test_fs_group(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "cfg")
    gid = os.getgid()
    await ConfigMapPlugin(getter).set_up(
        pod(securityContext={"fsGroup": gid}), volume(defaultMode=0o400), d
    )
    st = os.stat(f"{d}/a.conf")
    assert st.st_gid == gid and stat.S_IMODE(st.st_mode) == 0o440


async def test_tear_down(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "cfg")
    plugin = ConfigMapPlugin(getter)
    await plugin.set_up(pod(), volume(), d)
    await plugin.tear_down("u1", "cfg", d)
    assert not os.path.exists(d)
    await plugin.tear_down("u1", "cfg", d)
