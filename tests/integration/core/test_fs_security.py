"""The filesystem guards of the whole kubelet on the simulated runtime: what
the runtime is handed (read-only API volumes, subPaths as bind mounts that
cannot be swapped), what a pod cannot make it do (a subPath link out fails
the container with an event), and the modes of the kubelet's directories."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.volumemanager import mountutil
from tests.integration.core.conftest import Node, _node


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def event(self, ref: dict[str, Any], etype: str, reason: str, message: str) -> None:
        self.seen.append((ref.get("name", ""), etype, reason, message))


@pytest.fixture
async def recorded(simruntime, tmp_path: Path) -> AsyncIterator[tuple[Node, Events]]:  # type: ignore[no-untyped-def]
    events = Events()
    async for n in _node(simruntime, tmp_path, recorder=events):
        yield n, events


async def cri_mounts(node: Node, pod: str, cname: str) -> dict[str, pb.Mount]:
    cid = node.container(pod, cname)["containerID"].split("://")[1]
    st = (await node.rt.container_status(cid)).status
    return {m.container_path: m for m in st.mounts}


def dapi(name: str) -> dict[str, Any]:
    item = {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
    return {"name": name, "downwardAPI": {"items": [item]}}


async def test_api_volumes_reach_the_runtime_read_only(node: Node) -> None:
    volumes = [
        # Standalone: no API objects, so downwardAPI stands for the API volumes
        # (the projected, configMap and secret ones: tests/unit/volume/test_readonly_volumes.py).
        dapi("dapi"),
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts = [
        {"name": "dapi", "mountPath": "/dapi", "readOnly": False},
        {"name": "dapi", "mountPath": "/again"},  # readOnly unset
        {"name": "dapi", "mountPath": "/one/labels", "subPath": "labels", "readOnly": False},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    node.write("ro", [{"name": "c", "image": "busybox", "volumeMounts": mounts}], volumes=volumes)
    await node.wait(lambda: node.phase("ro") == "Running", what="Running")
    got = await cri_mounts(node, "ro", "c")
    assert got["/dapi"].readonly and got["/again"].readonly and got["/one/labels"].readonly
    assert not got["/scratch"].readonly


async def test_subpath_link_out_fails_the_container_with_an_event(
    recorded: tuple[Node, Events], tmp_path: Path
) -> None:
    node, events = recorded
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("host secret")
    shared = tmp_path / "shared"
    (shared / "good").mkdir(parents=True)
    (shared / "good" / "f").write_text("fine")
    (shared / "abs").symlink_to(victim)
    (shared / "rel").symlink_to("../victim")
    vol = [{"name": "data", "hostPath": {"path": str(shared)}}]

    def ctr(name: str, sub: str) -> dict[str, Any]:
        m = {"name": "data", "mountPath": "/d", "subPath": sub}
        return {"name": name, "image": "busybox", "volumeMounts": [m]}

    node.write("sp", [ctr("good", "good"), ctr("abs", "abs"), ctr("rel", "rel/secret")],
               volumes=vol)  # fmt: skip

    def waiting(c: str) -> dict[str, Any]:
        return node.container("sp", c)["state"].get("waiting") or {}

    await node.wait(lambda: node.container("sp", "good")["state"].get("running"), what="good")
    for c in ("abs", "rel"):
        await node.wait(lambda c=c: waiting(c).get("reason") == "CreateContainerConfigError",
                        what=f"{c} refused")  # fmt: skip
        assert waiting(c)["message"] == (
            f'failed to prepare subPath for volumeMount "data" of container "{c}"'
        )
        assert (
            "sp-node-a", "Warning", "Failed",
            f'Error: failed to prepare subPath for volumeMount "data" of container "{c}"',
        ) in events.seen  # fmt: skip
    # The runtime got the bind mount under volume-subpaths, never the plain path.
    uid = node.pod("sp")["metadata"]["uid"]
    target = Path(node.kubelet.root_dir) / "pods" / uid / "volume-subpaths" / "data" / "good" / "0"
    assert (await cri_mounts(node, "sp", "good"))["/d"].host_path == str(target)
    assert mountutil.mount_fstype(str(target)) is not None
    assert (target / "f").read_text() == "fine"
    assert (victim / "secret").read_text() == "host secret"
    # The pod goes: its subPath mounts go with it.
    (node.manifests / "sp.yaml").unlink()
    await node.wait(lambda: node.pod("sp") is None, timeout=60, what="pod removed")
    await node.wait(lambda: not target.exists(), timeout=60, what="subPath mount cleaned")
    assert mountutil.mount_fstype(str(target)) is None
    assert (shared / "good" / "f").read_text() == "fine"


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


async def test_kubelet_directories_have_upstream_modes(node: Node, tmp_path: Path) -> None:
    node.write(
        "modes",
        [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    await node.wait(lambda: node.phase("modes") == "Running", what="Running")
    root = Path(node.kubelet.root_dir)
    uid = node.pod("modes")["metadata"]["uid"]
    pod = root / "pods" / uid
    want = {
        root: 0o750,
        root / "pods": 0o750,
        root / "plugins": 0o750,
        root / "plugins_registry": 0o750,
        root / "pod-resources": 0o750,
        tmp_path / "logs": 0o750,  # podLogsDir
        pod: 0o750,
        pod / "volumes": 0o750,
        pod / "plugins": 0o750,
        pod / "containers": 0o750,
        pod / "containers" / "c": 0o750,
        pod / "volumes" / "kubernetes.io~empty-dir": 0o750,
        pod / "volumes" / "kubernetes.io~empty-dir" / "v": 0o777,  # as upstream's emptyDir
    }
    assert {p: mode(p) for p in want} == want
    (term,) = (pod / "containers" / "c").iterdir()
    assert mode(term) == 0o666  # the container may run as any user
