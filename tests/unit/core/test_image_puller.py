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
from tests.unit.core.test_runtime_manager import c, manager, pod


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
            m.ensure_image(p, p["spec"]["containers"][0], pb.PodSandboxConfig(), SyncResult())
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
        results.append(await m.ensure_image(p, p["spec"]["containers"][0],
                                            pb.PodSandboxConfig(), SyncResult()))  # fmt: skip
    # The burst of 2 goes through; the third finds the bucket empty.
    assert [r[2] for r in results] == [None, None, "pull QPS exceeded"]
    assert len(img.called("pull_image")) == 2
    assert m.waiting[p["metadata"]["uid"]]["c"] == ("ErrImagePull", "pull QPS exceeded")
    clock.step(1.0)  # one token back a second later
    p = pod([c("c", image="registry.local/q9:v1")])
    assert (await m.ensure_image(p, p["spec"]["containers"][0], pb.PodSandboxConfig(),
                                 SyncResult()))[2] is None  # fmt: skip


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
