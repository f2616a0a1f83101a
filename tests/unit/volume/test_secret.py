"""The secret volume plugin on a fake object getter."""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

import pytest

from kubelet.volume import VolumeError
from kubelet.volume.atomic_writer import DATA_DIR
from kubelet.volume.secret import SecretPlugin
from tests.unit.volume.helpers import FakeGetter, pod, read


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


@pytest.fixture
def getter() -> FakeGetter:
    g = FakeGetter("secret")
    g.objects[("ns", "s")] = {
        "metadata": {"name": "s", "namespace": "ns"},
        "type": "Opaque",
        "data": {"username": b64(b"admin"), "password": b64(b"p\x00ss\n"), "tls.key": b64(b"K")},
    }
    return g


def volume(**source: Any) -> dict[str, Any]:
    return {"name": "sec", "secret": {"secretName": "s", **source}}


async def test_decoded_keys_default_mode(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "sec")
    plugin = SecretPlugin(getter)
    assert plugin.name == "kubernetes.io/secret" and plugin.requires_remount
    assert plugin.can_support(volume()) and not plugin.can_support({"configMap": {}})
    await plugin.set_up(pod(), volume(), d)
    assert read(f"{d}/username") == "admin"
    with open(f"{d}/password", "rb") as fh:
        assert fh.read() == b"p\x00ss\n"
    assert stat.S_IMODE(os.stat(f"{d}/tls.key").st_mode) == 0o644


async def test_items_and_modes(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "sec")
    spec = volume(
        defaultMode=0o440,
        items=[
            {"key": "username", "path": "creds/user"},
            {"key": "password", "path": "pw", "mode": 0o400},
        ],
    )
    await SecretPlugin(getter).set_up(pod(), spec, d)
    assert read(f"{d}/creds/user") == "admin"
    assert stat.S_IMODE(os.stat(f"{d}/creds/user").st_mode) == 0o440
    assert stat.S_IMODE(os.stat(f"{d}/pw").st_mode) == 0o400
    assert not os.path.lexists(f"{d}/username")


async def test_missing_secret_and_keys(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "sec")
    with pytest.raises(VolumeError, match=r'^secret "gone" not found$'):
        await SecretPlugin(getter).set_up(pod(), {"name": "v", "secret": {"secretName": "gone"}}, d)
    await SecretPlugin(getter).set_up(
        pod(), {"name": "v", "secret": {"secretName": "gone", "optional": True}}, d
    )
    assert [n for n in os.listdir(d) if not n.startswith("..")] == []
    spec = volume(items=[{"key": "nokey", "path": "x"}])
    with pytest.raises(VolumeError, match=r"^references non-existent secret key: nokey$"):
        await SecretPlugin(getter).set_up(pod(), spec, str(tmp_path / "other"))
    spec["secret"]["optional"] = True
    await SecretPlugin(getter).set_up(pod(), spec, str(tmp_path / "other"))


async def test_update_and_no_rewrite(tmp_path: Any, getter: FakeGetter) -> None:
    d = str(tmp_path / "sec")
    plugin = SecretPlugin(getter)
    await plugin.set_up(pod(), volume(), d)
    data = os.readlink(f"{d}/{DATA_DIR}")
    await plugin.set_up(pod(), volume(), d)
    assert os.readlink(f"{d}/{DATA_DIR}") == data
    getter.objects[("ns", "s")]["data"] = {"username": b64(b"root")}
    await plugin.set_up(pod(), volume(), d)
    assert read(f"{d}/username") == "root" and not os.path.lexists(f"{d}/password")
    await plugin.tear_down("u1", "sec", d)
    assert not os.path.exists(d)


async def test_invalid_base64(tmp_path: Any, getter: FakeGetter) -> None:
    getter.objects[("ns", "s")]["data"] = {"bad": "not base64!"}
    with pytest.raises(VolumeError, match=r"secret key bad: invalid base64"):
        await SecretPlugin(getter).set_up(pod(), volume(), str(tmp_path / "sec"))


async def test_secret_files_live_on_a_tmpfs_never_on_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kubelet.util import mountutil

    d = str(tmp_path / "v")
    getter = FakeGetter("secret")
    getter.objects[("ns", "s")] = {"data": {"k": base64.b64encode(b"x").decode()}}
    plugin = SecretPlugin(getter)
    await plugin.set_up(pod(), {"name": "v", "secret": {"secretName": "s"}}, d)
    assert mountutil.mount_fstype(d, mountutil.mount_table()) == "tmpfs"
    assert plugin.can_adopt({}, d, "tmpfs") and not plugin.can_adopt({}, d, None)
    await plugin.tear_down("u", "v", d)
    assert not os.path.exists(d) and mountutil.mount_fstype(d, mountutil.mount_table()) is None
