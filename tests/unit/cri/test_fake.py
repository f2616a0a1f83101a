"""The in-memory CRI fakes follow the runtime state machine other unit tests rely on."""

from __future__ import annotations

import pytest

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService


def sandbox_config(uid: str = "u1") -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="p", namespace="default", uid=uid),
        labels={"app": "web"},
    )


def container_config(name: str = "c") -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name),
        image=pb.ImageSpec(image="busybox:1"),
        labels={"tier": name},
    )


async def test_container_state_machine_and_sandbox_stop() -> None:
    rt = FakeRuntimeService()
    sid = await rt.run_pod_sandbox(sandbox_config())
    cid = await rt.create_container(sid, container_config(), sandbox_config())
    assert (await rt.container_status(cid)).status.state == pb.CONTAINER_CREATED
    await rt.start_container(cid)
    st = (await rt.container_status(cid)).status
    assert st.state == pb.CONTAINER_RUNNING and st.started_at >= st.created_at > 0
    with pytest.raises(errors.CRIError):
        await rt.start_container(cid)  # only a created container starts

    await rt.stop_pod_sandbox(sid)
    st = (await rt.container_status(cid)).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137 and st.reason == "Error"
    assert (await rt.pod_sandbox_status(sid)).status.state == pb.SANDBOX_NOTREADY
    with pytest.raises(errors.CRIError, match="not ready"):
        await rt.create_container(sid, container_config("d"), sandbox_config())

    await rt.remove_pod_sandbox(sid)
    assert await rt.list_containers() == [] and await rt.list_pod_sandbox() == []
    with pytest.raises(errors.NotFoundError):
        await rt.container_status(cid)


async def test_filters_and_raw_bytes_agree() -> None:
    rt = FakeRuntimeService()
    a = await rt.run_pod_sandbox(sandbox_config("a"))
    b = await rt.run_pod_sandbox(sandbox_config("b"))
    ca = await rt.create_container(a, container_config("x"), sandbox_config("a"))
    await rt.create_container(b, container_config("y"), sandbox_config("b"))
    await rt.start_container(ca)
    rt.set_exited(ca, 0)

    only_a = await rt.list_containers(pb.ContainerFilter(pod_sandbox_id=a))
    assert [c.id for c in only_a] == [ca]
    exited = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_EXITED))
    assert [c.id for c in await rt.list_containers(exited)] == [ca]
    by_label = pb.ContainerFilter(label_selector={"tier": "y"})
    assert [c.pod_sandbox_id for c in await rt.list_containers(by_label)] == [b]
    assert (await rt.container_status(ca)).status.reason == "Completed"

    raw = pb.ListContainersResponse.FromString(await rt.list_containers_raw())
    assert {c.id for c in raw.containers} == {c.id for c in await rt.list_containers()}
    raw_sb = pb.ListPodSandboxResponse.FromString(
        await rt.list_pod_sandbox_raw(pb.PodSandboxFilter(id=b))
    )
    assert [s.id for s in raw_sb.items] == [b]


async def test_calls_recorded_and_errors_injected_n_times() -> None:
    rt = FakeRuntimeService()
    down = errors.UnavailableError("RunPodSandbox", "runtime down")
    rt.inject_error("run_pod_sandbox", down, times=2)
    for _ in range(2):
        with pytest.raises(errors.UnavailableError):
            await rt.run_pod_sandbox(sandbox_config())
    sid = await rt.run_pod_sandbox(sandbox_config())
    assert len(rt.called("run_pod_sandbox")) == 3
    assert rt.calls[-1] == ("run_pod_sandbox", (sandbox_config(), ""))
    assert list(rt.sandboxes) == [sid]  # failed calls left no state behind

    with pytest.raises(errors.InvalidArgumentError):
        await rt.run_pod_sandbox(pb.PodSandboxConfig())


async def test_images_pull_list_remove_and_registry_miss() -> None:
    img = FakeImageService(images=["pause:3.9"])
    ref = await img.pull_image(pb.ImageSpec(image="busybox:1"))
    assert ref.startswith("sha256:")
    assert (await img.image_status(pb.ImageSpec(image="busybox:1"))) is not None
    assert {i.repo_tags[0] for i in await img.list_images()} == {"pause:3.9", "busybox:1"}
    with pytest.raises(errors.CRIError, match="not found") as e:
        await img.pull_image(pb.ImageSpec(image="example.com/app:missing"))
    assert not isinstance(e.value, errors.NotFoundError)  # like containerd: UNKNOWN
    await img.remove_image(pb.ImageSpec(image="busybox:1"))
    assert await img.image_status(pb.ImageSpec(image="busybox:1")) is None
