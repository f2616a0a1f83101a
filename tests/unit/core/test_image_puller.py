"""serializeImagePulls / maxParallelImagePulls and registryPullQPS / registryBurst:
pulls of different pods' images as the runtime sees them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.images.puller import ImagePuller
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager, SyncResult
from kubelet.util.clock import FakeClock
from tests.unit.core.helpers import RecordingRecorder, c, manager, pod


class SlowImages(FakeImageService):
    """Pulls that last until released; records how many ran at once."""

    def __init__(self) -> None:
        super().__init__([])
        self.in_flight = 0
        self.most = 0
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def pull_image(
        self,
        image: pb.ImageSpec,
        auth: pb.AuthConfig | None = None,
        sandbox_config: pb.PodSandboxConfig | None = None,
    ) -> str:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.started.append(image.image)
        try:
            await self.release.wait()
            return await super().pull_image(image, auth, sandbox_config)
        finally:
            self.in_flight -= 1


async def pull_all(
    tmp_path: Path, puller: ImagePuller, n: int = 6
) -> tuple[SlowImages, list[tuple[str, pb.Image | None, str | None]]]:
    img = SlowImages()
    m: RuntimeManager = manager(
        tmp_path, FakeRuntimeService(), img, image_puller=puller, image_backoff=Backoff(10, 300)
    )
    pods = [pod([c("c", image=f"registry.local/app{i}:v1")]) for i in range(n)]
    tasks = [
        asyncio.create_task(
            m.image_manager.ensure_image(
                p, p["spec"]["containers"][0], pb.PodSandboxConfig(), SyncResult()
            )
        )
        for p in pods
    ]
    for _ in range(50):  # let every pull that may start, start
        await asyncio.sleep(0)
    seen = img.most
    img.release.set()
    results = await asyncio.gather(*tasks)
    img.most = seen
    return img, results


async def test_serialized_pulls_run_one_at_a_time_in_order(tmp_path: Path) -> None:
    img, results = await pull_all(tmp_path, ImagePuller(serialize=True))
    assert img.most == 1
    assert img.started == [f"registry.local/app{i}:v1" for i in range(6)]
    assert all(err is None for _, _, err in results)


@pytest.mark.parametrize(("limit", "want"), [(3, 3), (None, 6)])
async def test_parallel_pulls_are_bounded_by_max_parallel(
    tmp_path: Path, limit: int | None, want: int
) -> None:
    img, results = await pull_all(tmp_path, ImagePuller(serialize=False, max_parallel=limit))
    assert img.most == want
    assert all(err is None for _, _, err in results)


async def test_pull_qps_exceeded_fails_the_pull_and_backs_off(tmp_path: Path) -> None:
    clock = FakeClock()
    img = FakeImageService([])
    m: RuntimeManager = manager(
        tmp_path, FakeRuntimeService(), img,
        image_puller=ImagePuller(serialize=False, qps=1.0, burst=2, clock=clock.monotonic),
        image_backoff=Backoff(10, 300),
    )  # fmt: skip
    results = []
    for i in range(3):
        p = pod([c("c", image=f"registry.local/q{i}:v1")])
        results.append(await m.image_manager.ensure_image(p, p["spec"]["containers"][0],
                                                          pb.PodSandboxConfig(), SyncResult()))  # fmt: skip
    # The burst of 2 goes through; the third finds the bucket empty.
    assert [r[2] for r in results] == [None, None, "pull QPS exceeded"]
    assert len(img.called("pull_image")) == 2
    assert m.waiting[p["metadata"]["uid"]]["c"] == ("ErrImagePull", "pull QPS exceeded")
    clock.step(1.0)  # one token back a second later
    p = pod([c("c", image="registry.local/q9:v1")])
    assert (await m.image_manager.ensure_image(p, p["spec"]["containers"][0],
                                               pb.PodSandboxConfig(), SyncResult()))[2] is None  # fmt: skip


def test_from_config_defaults_serialize_and_qps() -> None:
    cfg = KubeletConfiguration()
    p = ImagePuller.from_config(cfg)
    assert p.limit == 1  # serializeImagePulls: true
    cfg.serialize_image_pulls = False
    assert ImagePuller.from_config(cfg).limit == 0  # unbounded
    cfg.max_parallel_image_pulls = 4
    assert ImagePuller.from_config(cfg).limit == 4
    cfg.registry_pull_qps = 0
    assert ImagePuller.from_config(cfg)._bucket is None  # 0: no limit


def test_image_size_labels_are_upstreams() -> None:
    from kubelet.images.metrics import image_size_bucket

    mib, gib = 1 << 20, 1 << 30
    assert image_size_bucket(0) == "N/A"  # the runtime did not say
    assert image_size_bucket(1) == image_size_bucket(10 * mib) == "0-10MB"
    assert image_size_bucket(10 * mib + 1) == "10MB-100MB"
    assert image_size_bucket(700 * mib) == "500MB-1GB"
    assert image_size_bucket(gib + 1) == "1GB-5GB"
    assert image_size_bucket(100 * gib) == "60GB-100GB"
    assert image_size_bucket(100 * gib + 1) == "GT100GB"


async def test_a_pull_is_timed_by_the_pulled_images_size_with_no_extra_status_call(
    tmp_path: Path,
) -> None:
    """Upstream asks the runtime for the image's size after each pull; here that
    one ImageStatus also serves the container's config (the image's user), which
    asked it anyway: the family costs no CRI call."""
    from kubelet.metrics import REGISTRY

    img = FakeImageService([])
    rt = FakeRuntimeService()
    rec = RecordingRecorder()
    m: RuntimeManager = manager(tmp_path, rt, img, recorder=rec)
    p = pod([c("c", image="registry.local/sized:v1")])
    count = ("kubelet_image_pull_duration_seconds_count", {"image_size_in_bytes": "0-10MB"})
    before = REGISTRY.get_sample_value(*count) or 0.0
    await m.sync_pod(p, await m.get_pod_status(p["metadata"]["uid"]))
    assert len(img.called("pull_image")) == 1
    assert REGISTRY.get_sample_value(*count) == before + 1  # the fake's images are 1 KiB
    statuses = [a for a in img.called("image_status") if a[0].startswith("sha256:")]
    assert len(statuses) == 1  # after the pull; the config asked nothing more
    pulled = [msg for _, _, reason, msg in rec.events if reason == "Pulled"]
    assert len(pulled) == 1 and pulled[0].endswith("Image size: 1024 bytes.")  # as upstream's
