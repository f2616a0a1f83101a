"""Our CRI client against the simulated runtime, both real gRPC over a unix socket."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService, runtime_ready
from kubelet.testing.process import short_dir
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import wait_for_async


def sandbox_config(tmp: Path, name: str = "web", uid: str = "uid-1") -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default", attempt=0),
        hostname=name,
        log_directory=str(tmp / "logs" / f"default_{name}_{uid}"),
        labels={"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name},
    )


def container_config(name: str, script: str, uid: str = "uid-1") -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0),
        image=pb.ImageSpec(image="busybox:1.36"),
        command=["sh", "-c", script],
        log_path=f"{name}/0.log",
        labels={"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name},
    )


async def test_sandbox_and_container_lifecycle(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    img = RemoteImageService(simruntime.endpoint, timeout=5)
    try:
        v = await rt.version()
        assert (v.runtime_name, v.runtime_api_version) == ("simruntime", "v1")
        assert await runtime_ready(rt) is None
        ref = await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
        assert ref.startswith("sha256:")
        assert (await img.image_status(pb.ImageSpec(image="busybox:1.36"))) is not None
        assert await img.image_status(pb.ImageSpec(image="nginx:1")) is None

        cfg = sandbox_config(tmp_path)
        sid = await rt.run_pod_sandbox(cfg)
        st = await rt.pod_sandbox_status(sid)
        assert st.status.state == pb.SANDBOX_READY and st.status.network.ip.startswith("10.88.")

        cid = await rt.create_container(
            sid, container_config("c", "echo hello; sleep 0.3; echo bye; exit 3"), cfg
        )
        assert (await rt.container_status(cid)).status.state == pb.CONTAINER_CREATED
        await rt.start_container(cid)
        assert (await rt.container_status(cid)).status.state == pb.CONTAINER_RUNNING

        async def exited() -> bool:
            return (await rt.container_status(cid)).status.state == pb.CONTAINER_EXITED

        await wait_for_async("the container to exit", exited, 10, every=0.05, retry_on=())
        s = (await rt.container_status(cid)).status
        assert (s.exit_code, s.reason) == (3, "Error")
        assert s.finished_at > s.started_at > 0
        log = Path(cfg.log_directory, "c", "0.log").read_text().splitlines()
        # A line printed just before the exit is written too, as by a shell.
        assert [x.split(" ", 1)[1] for x in log] == ["stdout F hello", "stdout F bye"]

        # raw List bytes decode to the same answer as the decoded call
        raw = await rt.list_containers_raw()
        assert pb.ListContainersResponse.FromString(raw).containers == await rt.list_containers()
        sraw = await rt.list_pod_sandbox_raw()
        assert [s.id for s in pb.ListPodSandboxResponse.FromString(sraw).items] == [sid]

        await rt.stop_pod_sandbox(sid)
        assert (await rt.pod_sandbox_status(sid)).status.state == pb.SANDBOX_NOTREADY
        await rt.remove_pod_sandbox(sid)
        assert await rt.list_containers() == []
        with pytest.raises(errors.NotFoundError):
            await rt.container_status(cid)
        await rt.remove_pod_sandbox(sid)  # idempotent
    finally:
        await rt.close()


async def test_stop_honours_sigterm_and_grace(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    img = RemoteImageService(simruntime.endpoint, timeout=5)
    try:
        await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
        cfg = sandbox_config(tmp_path)
        sid = await rt.run_pod_sandbox(cfg)
        polite = await rt.create_container(sid, container_config("a", "sleep 3600"), cfg)
        stubborn = await rt.create_container(
            sid, container_config("b", "trap '' TERM; sleep 3600"), cfg
        )
        for c in (polite, stubborn):
            await rt.start_container(c)
        t = time.monotonic()
        await rt.stop_container(polite, 5)
        assert time.monotonic() - t < 1.0
        assert (await rt.container_status(polite)).status.exit_code == 143
        t = time.monotonic()
        await rt.stop_container(stubborn, 1)
        assert time.monotonic() - t >= 0.9  # waited out the grace period
        assert (await rt.container_status(stubborn)).status.exit_code == 137
    finally:
        await rt.close()


async def test_events_stream_every_transition(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    img = RemoteImageService(simruntime.endpoint, timeout=5)
    seen: list[int] = []

    async def consume() -> None:
        async for ev in rt.get_container_events():
            seen.append(ev.container_event_type)
            assert ev.pod_sandbox_status.metadata.name == "web"

    task = asyncio.create_task(consume())
    try:
        await asyncio.sleep(0.2)
        await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
        cfg = sandbox_config(tmp_path)
        sid = await rt.run_pod_sandbox(cfg)
        cid = await rt.create_container(sid, container_config("c", "sleep 3600"), cfg)
        await rt.start_container(cid)
        await rt.stop_container(cid, 0)
        await rt.remove_container(cid)
        for _ in range(100):
            if len(seen) >= 4:
                break
            await asyncio.sleep(0.05)
        assert seen == [
            pb.CONTAINER_CREATED_EVENT,
            pb.CONTAINER_STARTED_EVENT,
            pb.CONTAINER_STOPPED_EVENT,
            pb.CONTAINER_DELETED_EVENT,
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await rt.close()


async def test_bad_requests_get_invalid_argument_and_missing_images_fail(simruntime) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    img = RemoteImageService(simruntime.endpoint, timeout=5)
    try:
        with pytest.raises(errors.InvalidArgumentError, match="metadata"):
            await rt.run_pod_sandbox(pb.PodSandboxConfig())
        with pytest.raises(errors.InvalidArgumentError):
            await rt.container_status("")
        with pytest.raises(errors.NotFoundError):
            await rt.start_container("does-not-exist")
        with pytest.raises(errors.CRIError, match="not found"):
            await img.pull_image(pb.ImageSpec(image="example.com/app:missing"))
        # the server survived all of it
        assert (await rt.version()).runtime_name == "simruntime"
    finally:
        await rt.close()


async def test_runtime_down_is_a_typed_error_within_the_deadline(tmp_path: Path) -> None:
    rt = RemoteRuntimeService(f"unix://{tmp_path}/nobody-home.sock", timeout=2)
    try:
        t = time.monotonic()
        with pytest.raises((errors.UnavailableError, errors.DeadlineExceededError)):
            await rt.version()
        assert time.monotonic() - t < 3
        assert (await runtime_ready(rt) or "").startswith("container runtime is down")
    finally:
        await rt.close()


async def test_client_reconnects_when_the_runtime_comes_back(tmp_path: Path) -> None:
    d = short_dir("reconn")
    sim = start_simruntime(d)
    rt = RemoteRuntimeService(sim.endpoint, timeout=2)
    try:
        assert (await rt.version()).runtime_name == "simruntime"
        sim.stop()
        with pytest.raises((errors.UnavailableError, errors.DeadlineExceededError)):
            await rt.version()
        sim = start_simruntime(d)  # the runtime restarts on the same socket

        async def name() -> str:
            return (await rt.version()).runtime_name

        reconnected = await wait_for_async(
            "the client to reconnect", name, 15, every=0.2, retry_on=(errors.CRIError,)
        )
        assert reconnected == "simruntime"
    finally:
        await rt.close()
        sim.stop()


async def test_a_burst_of_calls_is_served_not_cancelled(simruntime) -> None:  # type: ignore[no-untyped-def]
    # A kubelet stopping thousands of pods at once has that many calls in flight;
    # gRPC core's default pending-request limits (1,000 / 3,000) cancelled the
    # excess, which containerd never does.
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=60)
    try:
        results = await asyncio.gather(
            *(rt.list_containers(pb.ContainerFilter()) for _ in range(5000)),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert failed == [], f"{len(failed)} calls failed, first: {failed[0]!r}"
    finally:
        await rt.close()


def sandbox_info(st: pb.PodSandboxStatusResponse) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(st.info["info"])
    return info


async def test_update_pod_sandbox_resources_is_kept_in_the_sandbox(
    simruntime, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """UpdatePodSandboxResources (CRI v1.34) by its wire name and field
    numbers: the simulated runtime keeps what it is told in the sandbox's
    config, which the verbose status shows, as containerd does."""
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    try:
        sid = await rt.run_pod_sandbox(sandbox_config(tmp_path))
        overhead = pb.LinuxContainerResources(cpu_shares=102, memory_limit_in_bytes=16 << 20)
        resources = pb.LinuxContainerResources(
            cpu_shares=307, cpu_quota=30000, cpu_period=100000, memory_limit_in_bytes=96 << 20
        )
        await rt.update_pod_sandbox_resources(sid, overhead, resources)
        assert "info" not in (await rt.pod_sandbox_status(sid)).info  # verbose only
        linux = sandbox_info(await rt.pod_sandbox_status(sid, verbose=True))["config"]["linux"]
        assert linux["resources"] == {
            "cpuShares": "307", "cpuQuota": "30000", "cpuPeriod": "100000",
            "memoryLimitInBytes": str(96 << 20),
        }  # fmt: skip
        assert linux["overhead"] == {"cpuShares": "102", "memoryLimitInBytes": str(16 << 20)}
        with pytest.raises(errors.NotFoundError):
            await rt.update_pod_sandbox_resources("nope", overhead, resources)
    finally:
        await rt.close()


async def test_a_runtime_without_update_pod_sandbox_resources_answers_unimplemented() -> None:
    sim = start_simruntime(short_dir("sbres"), "--sandbox-resources", "unimplemented")
    rt = RemoteRuntimeService(sim.endpoint, timeout=5)
    try:
        sid = await rt.run_pod_sandbox(sandbox_config(Path(short_dir("sbres-logs"))))
        empty = pb.LinuxContainerResources()
        with pytest.raises(errors.UnimplementedError):
            await rt.update_pod_sandbox_resources(sid, empty, empty)
    finally:
        await rt.close()
        sim.stop()


async def test_a_containers_cdi_devices_are_shown_in_its_verbose_status(
    simruntime, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """CDI_devices (field 17) kept with the container and shown, as containerd
    shows its config, so a test of DRA can read what a container was given."""
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    img = RemoteImageService(simruntime.endpoint, timeout=5)
    try:
        await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
        cfg = sandbox_config(tmp_path)
        sid = await rt.run_pod_sandbox(cfg)
        ccfg = container_config("c", "sleep 1")
        ccfg.CDI_devices.add(name="gpu.example.com/gpu=0")
        cid = await rt.create_container(sid, ccfg, cfg)
        assert "info" not in (await rt.container_status(cid)).info  # verbose only
        info = json.loads((await rt.container_status(cid, verbose=True)).info["info"])
        assert info["config"]["CDIDevices"] == [{"name": "gpu.example.com/gpu=0"}]
    finally:
        await rt.close()
        await img.close()
