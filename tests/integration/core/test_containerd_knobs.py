"""KubeletConfiguration knobs that reach real containers (containerd + runc),
with the pod cgroups under a cgroup root private to the test."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet.cm.cgroup_manager import CgroupManager
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteImageService
from kubelet.images.image_gc_manager import ImageGCManager, ImageGCPolicy
from kubelet.testing.helpers import remove_cgroup_tree
from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import InProcessKubelet, in_process_kubelet
from kubelet.testing.oci import write_oci_tar

pytestmark = pytest.mark.containerd


def _pod_cgroups(root: str) -> list[str]:
    base = Path(f"/sys/fs/cgroup/pids/{root}/kubepods")
    return [str(p) for p in base.glob("**/pod*")]


@pytest.fixture
async def pids_node(containerd, tmp_path: Path) -> AsyncIterator[InProcessKubelet]:  # type: ignore[no-untyped-def]
    root = f"kpy-knobs-pids-{os.getpid()}-{time.monotonic_ns() % 100000}"
    try:
        async with in_process_kubelet(
            containerd.endpoint,
            tmp_path,
            cgroups_per_qos=True,
            cgroup_root=f"/{root}",
            pod_pids_limit=20,
        ) as n:
            yield n
            # Remove the pods so that their cgroups can go.
            for p in n.manifests.iterdir():
                p.unlink()
            await n.wait(lambda: not _pod_cgroups(root), timeout=60, what="pod cgroups gone")
            # ...from runc's own hierarchies too (name=systemd, unified).
            for m in CgroupManager("").runtime_only:
                assert not list(Path(m, root).glob("kubepods/**/pod*")), m
    finally:
        remove_cgroup_tree(root)


async def test_pod_pids_limit_stops_a_fork_loop(pids_node: InProcessKubelet) -> None:
    """podPidsLimit: pids.max of the pod cgroup, which the kernel enforces on
    every process of the pod: a subshell that forks 40 sleepers runs into it
    (its fork fails and it exits), the sleepers it made stay, and the pod
    never holds more than 20 tasks."""
    node = pids_node
    script = (
        "(i=0; while [ $i -lt 40 ]; do sleep 600 & i=$((i+1)); done); "
        "echo subshell ended; exec sleep 600"
    )
    node.write("forky", [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", script]}])
    await node.wait(lambda: node.phase("forky") == "Running", timeout=60, what="Running")
    uid = node.pod("forky")["metadata"]["uid"]
    root = node.kubelet.config.cgroup_root.strip("/")
    pod_dir = Path(f"/sys/fs/cgroup/pids/{root}/kubepods/besteffort/pod{uid}")
    assert (pod_dir / "pids.max").read_text().strip() == "20"
    log = node.manifests.parent / "logs" / f"default_forky-node-a_{uid}" / "c" / "0.log"
    await node.wait(lambda: "subshell ended" in log.read_text(), timeout=30, what="loop end")
    assert "can't fork" in log.read_text()
    # The kernel refused forks at the limit (counted in the forking task's own
    # cgroup, the container's, below the pod's); the sleepers made before it stay.
    refused = 0
    for f in pod_dir.glob("**/pids.events"):
        refused += int(dict(line.split() for line in f.read_text().splitlines())["max"])
    assert refused > 0
    assert 15 <= int((pod_dir / "pids.current").read_text()) <= 20
    assert node.container("forky", "c")["restartCount"] == 0


@pytest.fixture
async def knob_node(
    containerd, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[InProcessKubelet]:  # type: ignore[no-untyped-def]
    async with in_process_kubelet(containerd.endpoint, tmp_path, **request.param) as n:
        yield n


def _status_line(text: str, key: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(key))


@pytest.mark.parametrize(
    ("knob_node", "mode"),
    [({"seccomp_default": True}, "2"), ({"seccomp_default": False}, "0")],
    indirect=["knob_node"],
)
async def test_seccomp_default_confines_containers_that_name_no_profile(
    knob_node: InProcessKubelet, mode: str
) -> None:
    """seccompDefault: a container without a seccomp profile runs under the
    runtime's default filter (Seccomp: 2 in its status), else unconfined (0)."""
    node = knob_node
    cmd = "grep Seccomp: /proc/self/status; sleep 600"
    node.write("sc", [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", cmd]}])
    await node.wait(lambda: node.phase("sc") == "Running", timeout=60, what="Running")
    uid = node.pod("sc")["metadata"]["uid"]
    log = node.manifests.parent / "logs" / f"default_sc-node-a_{uid}" / "c" / "0.log"
    await node.wait(lambda: "Seccomp:" in log.read_text(), timeout=10, what="status line")
    assert _status_line(log.read_text().split(" stdout F ", 1)[1], "Seccomp") == mode


@pytest.mark.parametrize(
    "knob_node", [{"allowed_unsafe_sysctls": ["net.core.somaxconn"]}], indirect=True
)
async def test_allowed_unsafe_sysctls_reach_the_pod_and_others_are_refused(
    knob_node: InProcessKubelet,
) -> None:
    node = knob_node
    cmd = ["sh", "-c", "cat /proc/sys/net/core/somaxconn; sleep 600"]
    node.write(
        "allowed",
        [{"name": "c", "image": BUSYBOX_REF, "command": cmd}],
        securityContext={"sysctls": [{"name": "net.core.somaxconn", "value": "1234"}]},
    )
    node.write(
        "refused",
        [{"name": "c", "image": BUSYBOX_REF, "command": cmd}],
        securityContext={"sysctls": [{"name": "net.ipv4.tcp_max_syn_backlog", "value": "99"}]},
    )
    await node.wait(lambda: node.phase("allowed") == "Running", timeout=60, what="Running")
    uid = node.pod("allowed")["metadata"]["uid"]
    log = node.manifests.parent / "logs" / f"default_allowed-node-a_{uid}" / "c" / "0.log"
    await node.wait(lambda: " stdout F 1234" in log.read_text(), timeout=10, what="sysctl value")
    await node.wait(lambda: node.phase("refused") == "Failed", timeout=30, what="refused")
    assert node.pod("refused")["status"]["reason"] == "SysctlForbidden"


class _OnlyThese(RemoteImageService):
    """The image service, listing only the test's own images, so that GC on the
    shared containerd can never pick another test's image."""

    def __init__(self, endpoint: str, refs: set[str]) -> None:
        super().__init__(endpoint, 60)
        self.refs = refs

    async def list_images(self, filter: pb.ImageFilter | None = None) -> list[pb.Image]:
        return [i for i in await super().list_images(filter) if self.refs & set(i.repo_tags)]


async def test_image_maximum_gc_age_removes_unused_images_from_containerd(
    containerd,
    containerd_node: InProcessKubelet,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """imageMaximumGCAge: once the kubelet has watched that long, an image no
    container used for longer is removed from the runtime whatever the disk
    usage; an image in use stays; nothing goes before the age has passed."""
    node = containerd_node
    victim = f"docker.io/library/age-victim:{os.getpid()}"
    write_oci_tar(str(tmp_path / "v.tar"), victim, b"\0" * 1024, ["/none"], [])
    containerd.ctr("images", "import", str(tmp_path / "v.tar"))
    node.write("user", [{"name": "c", "image": BUSYBOX_REF, "command": ["sleep", "600"]}])
    await node.wait(lambda: node.phase("user") == "Running", timeout=60, what="Running")
    img = _OnlyThese(containerd.endpoint, {victim, BUSYBOX_REF})
    now = [0.0]
    gc = ImageGCManager(
        img, node.rt,
        ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=99, min_age=0,
                      max_age=300.0),
        clock=lambda: now[0],
    )  # fmt: skip
    try:
        now[0] = 299.0
        assert (await gc.garbage_collect()).removed == []  # not watched 5 minutes yet
        now[0] = 301.0
        removed = (await gc.garbage_collect()).removed
        gone = await img.image_status(pb.ImageSpec(image=victim))
        assert gone is None and len(removed) == 1
        assert await img.image_status(pb.ImageSpec(image=BUSYBOX_REF)) is not None
    finally:
        containerd.ctr("images", "rm", victim, check=False)
        await img.close()
