"""The legacy container log links in /var/log/containers (kuberuntime/legacy.go):
made when a container starts, removed with the container, and dangling ones
collected unless their container still runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubelet.config.common import apply_defaults
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.kuberuntime_gc import ContainerGC
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.kuberuntime.labels import POD_NAME, POD_NAMESPACE
from kubelet.testing.helpers import standalone_runtime_helper

from ..gc.fakes import add_container, add_sandbox

CID = "0123456789abcdef" * 4


def test_link_name_as_upstream() -> None:
    assert legacy.log_symlink("/d", "web-1", "ns", "app", CID) == f"/d/web-1_ns_app-{CID}.log"
    # Cut to what an ext4 file name can hold, suffix kept.
    long = legacy.log_symlink("/d", "p" * 253, "ns", "app", CID)
    assert long is not None and len(os.path.basename(long)) == 255 and long.endswith("p.log")
    assert legacy.container_id_of(f"/d/web-1_ns_app-{CID}.log") == CID
    assert legacy.container_id_of("/d/a_b_c-12345.log") is None  # too short to find


def test_names_that_could_leave_the_directory_get_no_link() -> None:
    for bad in (("../x", "ns", "c"), ("p", "a/b", "c"), ("p", "ns", ""), (".hidden", "ns", "c")):
        assert legacy.log_symlink("/d", *bad, CID) is None


def pod() -> dict[str, Any]:
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns"},
         "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}  # fmt: skip
    return apply_defaults(p, "/m/p.yaml", "file", "n1")


class LoggingRuntime(FakeRuntimeService):
    """Creates the container's log file, as a real runtime does."""

    async def create_container(self, *args: Any, **kw: Any) -> str:
        _, cfg, sandbox_cfg = args
        path = os.path.join(sandbox_cfg.log_directory, cfg.log_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("hello\n")
        return await super().create_container(*args, **kw)


async def test_a_started_container_gets_a_link_to_its_log(tmp_path: Path) -> None:
    links = tmp_path / "containers"
    links.mkdir()
    p = pod()
    rt = LoggingRuntime()
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]),
                       standalone_runtime_helper(str(tmp_path)), str(tmp_path / "logs"),
                       node=NodeSettings(container_logs_dir=str(links)))  # fmt: skip
    assert (await m.sync_pod(p, await m.get_pod_status(p["metadata"]["uid"]))).ok
    (cid,) = rt.containers
    name, uid = p["metadata"]["name"], p["metadata"]["uid"]
    link = links / f"{name}_ns_app-{cid}.log"
    assert os.readlink(link) == str(tmp_path / "logs" / f"ns_{name}_{uid}" / "app" / "0.log")
    assert link.read_text() == "hello\n"


async def test_no_link_without_a_log_file_or_a_directory(tmp_path: Path) -> None:
    p = pod()
    rt = FakeRuntimeService()
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]),
                       standalone_runtime_helper(str(tmp_path)), str(tmp_path / "logs"),
                       node=NodeSettings(container_logs_dir=str(tmp_path / "containers")))  # fmt: skip
    assert (await m.sync_pod(p, await m.get_pod_status(p["metadata"]["uid"]))).ok
    assert not (tmp_path / "containers").exists()


async def test_gc_removes_the_link_with_its_container_and_dangling_dead_ones(
    tmp_path: Path,
) -> None:
    links = tmp_path / "containers"
    links.mkdir()
    rt = FakeRuntimeService()
    sid = await add_sandbox(rt, "u1", 0)
    logs = tmp_path / "logs"
    logs.mkdir()

    async def container(name: str, state: int, created: float) -> tuple[str, Path]:
        log = logs / f"{name}-{created}.log"
        log.write_text("x")
        cid = await add_container(rt, sid, name, created, state=state, log_path=str(log))
        rt.containers[cid].labels.update({POD_NAME: "web", POD_NAMESPACE: "ns"})
        link = links / f"web_ns_{name}-{cid}.log"
        link.symlink_to(log)
        return cid, link

    old, old_link = await container("app", pb.CONTAINER_EXITED, 1)
    _, new_link = await container("app", pb.CONTAINER_EXITED, 2)
    _, running_link = await container("side", pb.CONTAINER_RUNNING, 3)
    # Logs gone under a running container (mid-rotation): its link stays.
    (logs / "side-3.log").unlink()
    # A dead link of a container the runtime does not know: collected.
    stray = links / f"web_ns_gone-{CID}.log"
    stray.symlink_to(logs / "nowhere.log")
    gc = ContainerGC(rt, lambda _uid: True, str(tmp_path / "pods"),
                     container_logs_dir=str(links))  # fmt: skip
    res = await gc.garbage_collect()
    assert res.containers == [old]
    assert not os.path.lexists(old_link)
    assert new_link.is_symlink() and running_link.is_symlink()
    assert not os.path.lexists(stray)
