"""Our CRI client against a real containerd with runc: a sandbox and a busybox container."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService, runtime_ready
from kubelet.testing.images import BUSYBOX_REF

pytestmark = pytest.mark.containerd


async def test_sandbox_and_container_on_containerd(containerd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(containerd.endpoint, timeout=60)
    img = RemoteImageService(containerd.endpoint, timeout=60)
    sid = ""
    try:
        v = await rt.version()
        assert v.runtime_name == "containerd"
        assert await runtime_ready(rt) is None
        assert await img.image_status(pb.ImageSpec(image=BUSYBOX_REF)) is not None
        logdir = tmp_path / "logs"
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(
                name="cri-test", uid="cri-test-uid", namespace="default"
            ),
            hostname="cri-test",
            log_directory=str(logdir),
            labels={"io.kubernetes.pod.uid": "cri-test-uid"},
            linux=pb.LinuxPodSandboxConfig(),
        )
        logdir.mkdir()
        sid = await rt.run_pod_sandbox(cfg)
        st = (await rt.pod_sandbox_status(sid)).status
        assert st.state == pb.SANDBOX_READY
        assert st.network.ip.startswith("10.244.")
        cid = await rt.create_container(
            sid,
            pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="hello"),
                image=pb.ImageSpec(image=BUSYBOX_REF),
                command=["sh", "-c", "echo hello from runc; exit 3"],
                log_path="hello/0.log",
                linux=pb.LinuxContainerConfig(),
            ),
            cfg,
        )
        await rt.start_container(cid)
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            status = (await rt.container_status(cid)).status
            if status.state == pb.CONTAINER_EXITED:
                break
            await asyncio.sleep(0.1)
        assert status is not None and status.state == pb.CONTAINER_EXITED
        assert status.exit_code == 3
        lines = (logdir / "hello" / "0.log").read_text().splitlines()
        assert any(line.endswith("stdout F hello from runc") for line in lines), lines
    finally:
        if sid:
            await rt.stop_pod_sandbox(sid)
            await rt.remove_pod_sandbox(sid)
        await rt.close()
