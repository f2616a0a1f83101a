"""The filesystem guards on a real containerd with runc: a container cannot
write into its API volumes (EROFS, whatever readOnly says), a subPath that
a container planted as a link out of its volume fails the container while a
good one is a bind mount the runtime cannot be raced on, and the
termination message is capped at 4 KiB."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.testing.containerd import Containerd
from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.util import mountutil
from kubelet.volume.atomic_writer import DATA_DIR, is_ts_name
from kubelet.volume.configmap import PLUGIN_NAME as CONFIGMAP

pytestmark = pytest.mark.containerd


class InMemoryConfigMaps:
    """This node is standalone (no API server to watch): the configMap comes
    from memory. What is under test is how the runtime mounts the volume."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(namespace, name)]


async def remove(node: InProcessKubelet, name: str, *gone_too: Path) -> None:
    """The pod's manifest removed; until its sandboxes (and `gone_too`) are gone:
    the runtime is shared by the tests that follow."""
    uid = node.pod(name)["metadata"]["uid"]
    (node.manifests / f"{name}.yaml").unlink()
    sel = pb.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid})

    async def gone() -> bool:
        return not await node.rt.list_pod_sandbox(sel) and not any(p.exists() for p in gone_too)

    for _ in range(600):
        if await gone():
            break
        await asyncio.sleep(0.1)
    assert await gone()


def volume_dir(node: InProcessKubelet, pod: str, plugin: str, name: str) -> Path:
    uid = node.pod(pod)["metadata"]["uid"]
    return Path(node.kubelet.root_dir) / "pods" / uid / "volumes" / plugin / name


@pytest.fixture
async def api_refs_node(containerd: Containerd, tmp_path: Path) -> AsyncIterator[InProcessKubelet]:
    """Static pods stand for API pods here (no API server): with the gate on,
    a static pod naming a configMap is refused, as upstream refuses it."""
    gates = {"PreventStaticPodAPIReferences": False}
    async with in_process_kubelet(containerd.endpoint, tmp_path, feature_gates=gates) as n:
        yield n


async def test_writes_into_api_volumes_fail_with_erofs(api_refs_node: InProcessKubelet) -> None:
    node = api_refs_node
    for p in node.kubelet.volume_manager.plugins:
        if p.name == CONFIGMAP:
            p.configmaps = InMemoryConfigMaps(  # type: ignore[attr-defined]
                {("default", "app"): {"data": {"key": "value"}}}
            )
    item = {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
    volumes = [
        {"name": "cm", "configMap": {"name": "app"}},
        {"name": "dapi", "downwardAPI": {"items": [item]}},
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts = [
        {"name": "cm", "mountPath": "/cm", "readOnly": False},
        {"name": "dapi", "mountPath": "/dapi"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    # Each write attempt appends its error; the last line proves the
    # container ran its script to the end with a writable emptyDir.
    script = (
        "for d in /cm /dapi; do "
        "touch $d/planted 2>>/dev/termination-log; "
        "ln -s /etc $d/evil 2>>/dev/termination-log; "
        "rm -f $d/key $d/labels 2>>/dev/termination-log; "
        "done; "
        "touch /scratch/ok && echo scratch-writable >>/dev/termination-log; exit 7"
    )
    c = {"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", script], "volumeMounts": mounts}
    # Keeps the pod running: a terminal pod's volumes are torn down, and the
    # host side is checked below.
    keeper = {"name": "keeper", "image": BUSYBOX_REF, "command": ["sleep", "infinity"]}
    node.write("erofs", [c, keeper], volumes=volumes, restartPolicy="Never")

    await node.wait(
        lambda: "terminated" in node.container("erofs", "c")["state"], 90, "c terminated"
    )
    term = node.container("erofs", "c")["state"]["terminated"]
    assert term["exitCode"] == 7
    lines = term["message"].splitlines()
    assert lines[-1] == "scratch-writable"
    errors = lines[:-1]
    assert len(errors) == 6 and all("Read-only file system" in e for e in errors), errors
    assert any("/cm/planted" in e for e in errors) and any("/dapi/planted" in e for e in errors)
    # On the host the volumes are as the kubelet wrote them.
    for plugin, name, key, text in (
        ("kubernetes.io~configmap", "cm", "key", "value"),
        ("kubernetes.io~downward-api", "dapi", "labels", ""),
    ):
        d = volume_dir(node, "erofs", plugin, name)
        assert is_ts_name(os.readlink(d / DATA_DIR))
        assert not (d / "planted").exists()
        assert (d / key).read_text() == text
    await remove(node, "erofs")


async def test_subpath_planted_link_fails_the_container_good_one_is_bound(
    containerd_node: InProcessKubelet,
) -> None:
    node = containerd_node
    init = {
        "name": "plant",
        "image": BUSYBOX_REF,
        "command": ["sh", "-c", "mkdir -p /data/good && echo fine >/data/good/f && "
                    "ln -s / /data/escape && ln -s " + "../" * 30 + " /data/up"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }  # fmt: skip

    def ctr(name: str, sub: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": BUSYBOX_REF,
            "command": ["sh", "-c", "cat /d/f; sleep infinity"],
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": sub}],
        }

    node.write(
        "subpath",
        [ctr("good", "good"), ctr("escape", "escape/etc"), ctr("up", "up/etc")],
        initContainers=[init],
        volumes=[{"name": "data", "emptyDir": {}}],
        terminationGracePeriodSeconds=1,
    )

    def waiting(c: str) -> dict[str, Any]:
        return node.container("subpath", c)["state"].get("waiting") or {}

    await node.wait(lambda: node.container("subpath", "good")["state"].get("running"),
                    timeout=90, what="good running")  # fmt: skip
    for c in ("escape", "up"):
        await node.wait(lambda c=c: waiting(c).get("reason") == "CreateContainerConfigError",
                        timeout=60, what=f"{c} refused")  # fmt: skip
        assert waiting(c)["message"] == (
            f'failed to prepare subPath for volumeMount "data" of container "{c}"'
        )
    uid = node.pod("subpath")["metadata"]["uid"]
    target = Path(node.kubelet.root_dir) / "pods" / uid / "volume-subpaths" / "data" / "good" / "0"
    cid = node.container("subpath", "good")["containerID"].split("://")[1]
    st = (await node.rt.container_status(cid)).status
    assert {m.container_path: m.host_path for m in st.mounts}["/d"] == str(target)
    assert (target / "f").read_text() == "fine\n"
    await remove(node, "subpath", target)
    assert mountutil.mount_fstype(str(target)) is None


async def test_termination_message_capped_at_4k(containerd_node: InProcessKubelet) -> None:
    node = containerd_node
    script = "head -c 10000 /dev/zero | tr '\\0' x >/dev/termination-log; printf END >>/dev/termination-log"
    node.write("term", [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", script]}],
               restartPolicy="Never")  # fmt: skip
    await node.wait(lambda: node.phase("term") == "Succeeded", timeout=90, what="Succeeded")
    message = node.container("term", "c")["state"]["terminated"]["message"]
    assert len(message) == 4096 and message.endswith("xEND")


async def test_recursive_read_only_reaches_the_submounts(
    containerd_node: InProcessKubelet, tmp_path: Path
) -> None:
    """recursiveReadOnly (RecursiveReadOnlyMounts, GA): containerd 2 with runc
    names the feature for its handler; a mount that asks for it is read-only
    down to its submounts, a plain read-only one is not."""
    node = containerd_node
    await node.wait(lambda: node.kubelet.runtime.state.handler_supports_recursive_read_only(""),
                    30, "the runtime's handlers")  # fmt: skip
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    mountutil.mount("tmpfs", str(shared / "sub"), "tmpfs", "size=1m")  # as root, as CI runs
    try:
        probe = "if touch /d/sub/f 2>/dev/null; then echo writable; else echo read-only; fi"

        def ctr(name: str, **mount: Any) -> dict[str, Any]:
            m = {"name": "data", "mountPath": "/d", "readOnly": True, **mount}
            return {"name": name, "image": BUSYBOX_REF, "volumeMounts": [m],
                    "command": ["sh", "-c", probe + " >/dev/termination-log"]}  # fmt: skip

        node.write("rro", [ctr("rro", recursiveReadOnly="Enabled"), ctr("plain")],
                   volumes=[{"name": "data", "hostPath": {"path": str(shared)}}],
                   restartPolicy="Never")  # fmt: skip
        for c, want in (("rro", "read-only"), ("plain", "writable")):
            await node.wait(lambda c=c: "terminated" in node.container("rro", c)["state"], 90, c)
            assert node.container("rro", c)["state"]["terminated"]["message"].strip() == want
        await remove(node, "rro")
    finally:
        mountutil.umount(str(shared / "sub"))
