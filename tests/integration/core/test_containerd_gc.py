"""Node hygiene on a real containerd with runc: log rotation with ReopenContainerLog,
and image GC on an image filesystem that really is full (a private containerd
whose root is a small tmpfs)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
from kubelet.images.image_gc_manager import ImageGCManager, ImageGCPolicy, statvfs_usage
from kubelet.kuberuntime.labels import CONTAINER_NAME, POD_UID
from kubelet.logs.container_log_manager import ContainerLogManager, LogRotatePolicy
from kubelet.testing.containerd import Containerd
from kubelet.testing.images import BUSYBOX_REF, PAUSE_REF
from kubelet.testing.oci import write_oci_tar
from kubelet.testing.parts import part_unavailable, start_containerd

pytestmark = pytest.mark.containerd

KiB = 1024
MiB = 1024 * KiB


async def run_pod(
    rt: RemoteRuntimeService, uid: str, logdir: Path, command: str
) -> tuple[str, str, pb.PodSandboxConfig]:
    logdir.mkdir(parents=True, exist_ok=True)
    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=uid, uid=uid, namespace="default"),
        hostname=uid,
        log_directory=str(logdir),
        labels={POD_UID: uid},
        linux=pb.LinuxPodSandboxConfig(),
    )
    sid = await rt.run_pod_sandbox(cfg)
    cid = await rt.create_container(
        sid,
        pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="c"),
            image=pb.ImageSpec(image=BUSYBOX_REF),
            command=["sh", "-c", command],
            log_path="c/0.log",
            labels={POD_UID: uid, CONTAINER_NAME: "c"},
            linux=pb.LinuxContainerConfig(),
        ),
        cfg,
    )
    await rt.start_container(cid)
    return sid, cid, cfg


async def remove_pod(rt: RemoteRuntimeService, sid: str) -> None:
    with contextlib.suppress(Exception):
        await rt.stop_pod_sandbox(sid)
        await rt.remove_pod_sandbox(sid)


async def test_log_rotation_keeps_max_files_of_bounded_size(containerd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt = RemoteRuntimeService(containerd.endpoint, timeout=60)
    # 3 MiB of 32 KiB lines, one every 100 ms, then a marker.
    writer = (
        "i=0; while [ $i -lt 96 ]; do "
        "dd if=/dev/zero bs=1024 count=32 2>/dev/null | tr '\\0' x; echo; "
        "usleep 100000; i=$((i+1)); done; echo DONE; sleep 3600"
    )
    max_size, max_files = 256 * KiB, 3
    sid = ""
    try:
        sid, cid, _ = await run_pod(rt, "gc-log-test", tmp_path / "logs", writer)
        logdir = tmp_path / "logs" / "c"
        m = ContainerLogManager(
            rt, LogRotatePolicy(max_size=max_size, max_files=max_files), monitor_interval=0.05
        )
        stop = asyncio.Event()
        task = asyncio.create_task(m.run(stop))
        seen_max_files = 0
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                names = os.listdir(logdir)
                seen_max_files = max(seen_max_files, len([n for n in names if ".tmp" not in n]))
                with contextlib.suppress(FileNotFoundError):  # renamed, not yet reopened
                    if b"DONE" in (logdir / "0.log").read_bytes():
                        break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError(f"the writer did not finish: {sorted(os.listdir(logdir))}")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        names = sorted(os.listdir(logdir))
        assert seen_max_files <= max_files, names
        assert len(names) <= max_files and "0.log" in names, names
        gz = [n for n in names if n.endswith(".gz")]
        plain = [n for n in names if n.startswith("0.log.") and not n.endswith(".gz")]
        assert len(plain) == 1 and len(gz) == max_files - 2, names
        # A file ends up over the limit by at most what is written in the round (or,
        # when the log was rotated in the same second already, the second) it waits.
        for n in names:
            data = (logdir / n).read_bytes()
            if n.endswith(".gz"):
                data = gzip.decompress(data)
            assert len(data) < 3 * max_size, (n, len(data))
            for line in data.splitlines():
                assert b" stdout " in line, line[:80]  # whole CRI records on both sides of a cut
        # The runtime writes to the reopened file: the marker landed in the new 0.log,
        # and an explicit reopen of a running container works too.
        await rt.reopen_container_log(cid)
        assert (logdir / "0.log").exists()
    finally:
        if sid:
            await remove_pod(rt, sid)
        await rt.close()


def data_layer(size: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("data/blob")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    return buf.getvalue()


@pytest.fixture(scope="module")
def small_containerd() -> Iterator[Containerd]:
    """A private containerd whose root is a 256 MiB tmpfs, so the test can fill it."""
    d = f"/tmp/kpy-gc-{os.getpid()}"
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", d], capture_output=True, text=True
    )
    if r.returncode != 0:
        os.rmdir(d)
        part_unavailable("containerd on a tmpfs", f"cannot mount a tmpfs: {r.stderr.strip()}")
    c = Containerd(d, subnet="10.244.19.0/24", bridge="kpygc")
    try:
        start_containerd(c)
        yield c
    finally:
        c.stop()
        subprocess.run(["umount", "-l", d], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(d)


async def test_image_gc_frees_a_full_image_fs_and_keeps_images_in_use(
    small_containerd: Containerd, tmp_path: Path
) -> None:
    c = small_containerd
    victim = "docker.io/library/gc-victim:1"
    write_oci_tar(str(tmp_path / "victim.tar"), victim, data_layer(24 * MiB), ["/none"], [])
    c.ctr("images", "import", str(tmp_path / "victim.tar"))
    rt = RemoteRuntimeService(c.endpoint, timeout=60)
    img = RemoteImageService(c.endpoint, timeout=60)
    filler = Path(c.directory) / "filler"
    sid = ""
    try:
        sid, _, _ = await run_pod(rt, "gc-image-test", tmp_path / "logs", "sleep 3600")
        ids = {
            ref: (await img.image_status(pb.ImageSpec(image=ref)))
            for ref in (victim, BUSYBOX_REF, PAUSE_REF)
        }
        assert all(ids.values()), ids
        mount = (await img.image_fs_info()).image_filesystems[0].fs_id.mountpoint
        assert mount.startswith(c.directory)
        # Fill the tmpfs to just past 90%: the victim alone brings it back under 88%.
        before = statvfs_usage(mount)
        need = before.available - before.capacity * 10 // 100 + 1 * MiB
        with open(filler, "wb") as fh:
            fh.write(b"\1" * need)
        full = statvfs_usage(mount)
        assert 100 - full.available * 100 // full.capacity >= 90
        events: list[tuple[str, str, str]] = []
        gc = ImageGCManager(
            img,
            rt,
            ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=88, min_age=0),
            sandbox_image=PAUSE_REF,
            node_event=lambda *e: events.append(e),
        )
        res = await gc.garbage_collect()
        assert res.removed == [ids[victim].id], res  # type: ignore[union-attr]
        assert events == []
        assert await img.image_status(pb.ImageSpec(image=victim)) is None
        assert await img.image_status(pb.ImageSpec(image=BUSYBOX_REF)) is not None  # in use
        assert await img.image_status(pb.ImageSpec(image=PAUSE_REF)) is not None  # sandbox image
        after = statvfs_usage(mount)
        assert after.available - full.available >= 20 * MiB  # the runtime really freed it
    finally:
        filler.unlink(missing_ok=True)
        if sid:
            await remove_pod(rt, sid)
        await rt.close()
        await img.close()
