"""hostUsers: false on a real containerd with runc: the pod runs in a user
namespace of its own whose uid/gid maps are the range the kubelet allocated
(read from the container's own /proc/self/uid_map through its log), its
volumes are idmapped mounts (a file container root writes is owned by 0 on
the host, not by the mapped host ID), the range survives a kubelet restart
and is freed when the pod goes. A host-users pod next to it sees the
identity map."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet

pytestmark = pytest.mark.containerd

SCRIPT = (
    "cat /proc/self/uid_map /proc/self/gid_map; id -u; "
    "echo x > /data/by-root; echo written; sleep infinity"
)
IDENTITY = ["0", "0", "4294967295"]


def _pod_spec(host_users: bool | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "terminationGracePeriodSeconds": 1,
    }
    if host_users is not None:
        spec["hostUsers"] = host_users
    return spec


def _container() -> list[dict[str, Any]]:
    return [
        {
            "name": "c",
            "image": BUSYBOX_REF,
            "command": ["sh", "-c", SCRIPT],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }
    ]


def _log_lines(tmp_path: Path, pod_name: str) -> list[str]:
    """The container's stdout lines (CRI log format: time stream tag text)."""
    out: list[str] = []
    for f in glob.glob(str(tmp_path / "logs" / f"default_{pod_name}_*" / "c" / "*.log")):
        with open(f) as fh:
            out += [
                line.split(" ", 3)[3] for line in fh.read().splitlines() if line.count(" ") >= 3
            ]
    return out


def _maps(lines: list[str]) -> list[list[str]]:
    return [ln.split() for ln in lines if len(ln.split()) == 3 and ln.split()[0].isdigit()]


async def _running_with_output(node: InProcessKubelet, tmp_path: Path, name: str) -> list[str]:
    full = f"{name}-{node.node_name}"
    await node.wait(lambda: node.phase(name) == "Running", timeout=120, what=f"{name} Running")
    await node.wait(
        lambda: "written" in _log_lines(tmp_path, full), timeout=60, what=f"{name} output"
    )
    return _log_lines(tmp_path, full)


async def test_host_users_false_runs_in_the_allocated_range(containerd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(containerd.endpoint, 10)
    try:
        st = await rt.status()
        handlers = {h.name: h.features.user_namespaces for h in st.runtime_handlers}
    finally:
        await rt.close()
    # containerd 2 with runc 1.5 on this kernel says yes (runc features: user
    # namespaces and idmap mounts); if it ever does not, that is the failure.
    assert handlers.get("") is True, f"containerd handlers: {handlers}"

    async with in_process_kubelet(containerd.endpoint, tmp_path) as node:
        node.write("userns", _container(), **_pod_spec(False))
        node.write("hostns", _container(), **_pod_spec(None))
        lines = await _running_with_output(node, tmp_path, "userns")
        host_lines = await _running_with_output(node, tmp_path, "hostns")

        p = node.pod("userns")
        assert p is not None
        uid = p["metadata"]["uid"]
        host_id = node.kubelet.runtime.userns.allocated(uid)
        assert host_id is not None and host_id >= 65536 and host_id % 65536 == 0
        # uid_map then gid_map, each the one line "0 <host_id> 65536"
        assert _maps(lines) == [["0", str(host_id), "65536"]] * 2, lines
        assert "0" in lines  # id -u: root inside its namespace
        # the pod's file, upstream's JSON
        root = tmp_path / "root"
        doc = json.loads((root / "pods" / uid / "userns").read_text())
        one = [{"hostId": host_id, "containerId": 0, "length": 65536}]
        assert doc == {"uidMappings": one, "gidMappings": one}
        # the emptyDir is idmapped: container root's file is 0-owned on disk
        (written,) = glob.glob(str(root / "pods" / uid / "volumes" / "*" / "data" / "by-root"))
        assert os.stat(written).st_uid == 0 and os.stat(written).st_gid == 0
        # the host-users pod: the identity map, no range, no file
        assert _maps(host_lines) == [IDENTITY] * 2, host_lines
        hp = node.pod("hostns")
        assert (
            hp is not None and node.kubelet.runtime.userns.allocated(hp["metadata"]["uid"]) is None
        )
        assert not (root / "pods" / hp["metadata"]["uid"] / "userns").exists()
        # the sandbox runs with mode POD and the range, as the runtime reports it
        sandboxes = await node.rt.list_pod_sandbox()
        (sb,) = [s for s in sandboxes if s.metadata.uid == uid]
        ns = (await node.rt.pod_sandbox_status(sb.id)).status.linux.namespaces.options
        assert ns.userns_options.mode == pb.POD
        assert [(m.host_id, m.container_id, m.length) for m in ns.userns_options.uids] == [
            (host_id, 0, 65536)
        ]
        cid = node.container("userns", "c")["containerID"]

    # A restarted kubelet gives the running pod the range it has and does not
    # restart its container.
    async with in_process_kubelet(containerd.endpoint, tmp_path) as node:
        assert node.kubelet.runtime.userns.allocated(uid) == host_id
        await node.wait(lambda: node.phase("userns") == "Running", timeout=60, what="Running")
        await node.wait(
            lambda: node.container("userns", "c")["containerID"] == cid,
            timeout=30,
            what="same container",
        )
        assert node.container("userns", "c")["restartCount"] == 0
        # The pod goes: its range is freed and its file goes with its directory.
        for m in (tmp_path / "manifests").iterdir():
            m.unlink()
        await node.wait(
            lambda: node.kubelet.runtime.userns.allocated(uid) is None,
            timeout=90,
            what="range freed",
        )
        await node.wait(
            lambda: not (tmp_path / "root" / "pods" / uid / "userns").exists(),
            timeout=60,
            what="file removed",
        )
