"""container_ids on whichever implementation this process runs."""

from __future__ import annotations

import pytest

import kubelet
from kubelet.cri import rawlist
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService


def test_the_product_runs_the_native_version() -> None:
    want = "native_container_ids" if kubelet.__impl__ == "native" else "reference_container_ids"
    assert rawlist.container_ids is getattr(rawlist, want)


def test_ids_in_response_order() -> None:
    raw = pb.ListContainersResponse(
        containers=[
            pb.Container(id="b", state=pb.CONTAINER_RUNNING, labels={"io.kubernetes.pod.uid": "u"}),
            pb.Container(id="a", state=pb.CONTAINER_EXITED, annotations={"k": "v"}),
            pb.Container(id="c"),
        ]
    ).SerializeToString()
    assert rawlist.container_ids(raw) == ["b", "a", "c"]
    assert rawlist.container_ids(b"") == []


def test_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="undecodable ListContainersResponse"):
        rawlist.container_ids(b"\x0a\x05abc")


async def test_the_fakes_raw_list_filtered_on_running() -> None:
    rt = FakeRuntimeService()
    sid = await rt.run_pod_sandbox(
        pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="p", uid="u"))
    )
    cfg = pb.ContainerConfig(metadata=pb.ContainerMetadata(name="x"))
    running = await rt.create_container(sid, cfg, pb.PodSandboxConfig())
    await rt.start_container(running)
    await rt.create_container(sid, cfg, pb.PodSandboxConfig())  # created, not running
    running_only = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    assert rawlist.container_ids(await rt.list_containers_raw(running_only)) == [running]
