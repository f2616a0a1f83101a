"""Image GC on the CRI fakes, a model disk and a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.fake import FakeRuntimeService
from kubelet.images.image_gc_manager import ImageGCError, ImageGCManager, ImageGCPolicy

from .fakes import Clock, Disk, DiskImages, add_container, add_sandbox

MiB = 1 << 20


class Node:
    """1000 MiB disk; images a..e of 100 MiB each on 300 MiB of other data (80%)."""

    def __init__(self, sandbox_image: str = "", **policy: object) -> None:
        self.disk = Disk(1000 * MiB, 300 * MiB)
        self.images = DiskImages(self.disk)
        for name in "abcde":
            self.images.add(f"sha256:{name}", 100 * MiB, (f"docker.io/library/{name}:1",))
        self.rt = FakeRuntimeService()
        self.clock = Clock(0.0)
        self.events: list[tuple[str, str, str]] = []
        self.sid = ""
        kw = {"min_age": 0.0, **policy}
        self.gc = ImageGCManager(
            self.images,
            self.rt,
            ImageGCPolicy(**kw),  # type: ignore[arg-type]
            sandbox_image=sandbox_image,
            node_event=lambda *e: self.events.append(e),
            fs_usage=self.images.usage,
            clock=self.clock,
        )

    async def use(self, image: str, running: bool = True) -> str:
        if not self.sid:
            self.sid = await add_sandbox(self.rt, "u1", 0)
        state = pb.CONTAINER_RUNNING if running else pb.CONTAINER_EXITED
        return await add_container(self.rt, self.sid, "c", 0, state=state, image=image)

    def present(self) -> set[str]:
        return {i.removeprefix("sha256:") for i in self.images.images}

    def fill(self, percent: int) -> None:
        """Set the other data so that usage is `percent`."""
        images = sum(i.size for i in self.images.images.values())
        self.disk.base = self.disk.capacity * percent // 100 - images


async def test_below_the_high_threshold_nothing_is_removed() -> None:
    n = Node()
    n.fill(84)
    res = await n.gc.garbage_collect()
    assert res.removed == [] and n.present() == set("abcde")
    assert n.images.called("remove_image") == []


async def test_over_the_high_threshold_lru_images_go_until_the_low_threshold() -> None:
    n = Node()
    ca = await n.use("sha256:a")
    cb = await n.use("docker.io/library/b:1")  # by tag, as some runtimes report it
    await n.gc.garbage_collect()  # t=0: a and b in use
    n.clock.now = 100
    del n.rt.containers[ca]
    await n.gc.garbage_collect()  # t=100: only b in use
    n.clock.now = 200
    del n.rt.containers[cb]
    n.fill(86)  # 860 MiB used: 60 MiB to free to reach 80%... then 160 MiB for 70%
    res = await n.gc.garbage_collect()
    # Never-used c, d, e first (ties by first detection, then ID order here), one is enough.
    assert len(res.removed) == 1 and res.removed[0] in {"sha256:c", "sha256:d", "sha256:e"}
    n2 = Node(low_threshold_percent=50)
    ca = await n2.use("sha256:a")
    cb = await n2.use("docker.io/library/b:1")
    await n2.gc.garbage_collect()
    n2.clock.now = 100
    del n2.rt.containers[ca]
    await n2.gc.garbage_collect()
    n2.clock.now = 200
    del n2.rt.containers[cb]
    n2.fill(90)  # 900 used, 400 MiB to free: c, d, e never used, then a (used at 0)
    res = await n2.gc.garbage_collect()
    assert res.removed[3:] == ["sha256:a"] and set(res.removed[:3]) == {
        "sha256:c",
        "sha256:d",
        "sha256:e",
    }
    assert n2.present() == {"b"} and res.freed == 400 * MiB
    assert n2.events == []


async def test_images_in_use_are_never_removed_and_a_shortfall_is_an_event() -> None:
    n = Node(high_threshold_percent=50, low_threshold_percent=10)
    await n.use("sha256:a")
    await n.use("sha256:b", running=False)  # a dead container still holds its image
    n.fill(95)
    with pytest.raises(ImageGCError) as exc:
        await n.gc.garbage_collect()
    assert n.present() == {"a", "b"}
    msg = (
        f"Failed to garbage collect required amount of images. Attempted to free {850 * MiB} "
        f"bytes, but only found {300 * MiB} bytes eligible to free."
    )
    assert str(exc.value) == msg
    assert n.events == [("Warning", "FreeDiskSpaceFailed", msg)]


async def test_min_age_counts_from_first_detection() -> None:
    n = Node(min_age=120.0, low_threshold_percent=0)
    n.fill(90)
    with pytest.raises(ImageGCError):
        await n.gc.garbage_collect()  # t=0: all first detected now
    assert n.present() == set("abcde")
    n.images.add("sha256:new", 100 * MiB)
    n.clock.now = 121
    with pytest.raises(ImageGCError):  # low threshold 0%: never enough
        await n.gc.garbage_collect()
    assert n.present() == {"new"}


async def test_max_age_removes_images_unused_that_long_regardless_of_usage() -> None:
    n = Node(max_age=600.0, min_age=0.0)
    n.fill(60)
    c = await n.use("sha256:a")
    n.clock.now = 100
    await n.gc.garbage_collect()  # a last used at 100
    del n.rt.containers[c]
    n.clock.now = 600  # not yet max_age since GC began: nothing is known to be old
    assert (await n.gc.garbage_collect()).removed == []
    n.clock.now = 650  # never-used images are older than any max age
    assert set((await n.gc.garbage_collect()).removed) == {f"sha256:{x}" for x in "bcde"}
    assert n.present() == {"a"}  # last used 550 s ago
    n.clock.now = 701
    assert (await n.gc.garbage_collect()).removed == ["sha256:a"]
    assert n.events == []


async def test_pinned_and_sandbox_images_are_never_removed() -> None:
    n = Node(low_threshold_percent=0)
    n.images.add("sha256:pinned", 100 * MiB, pinned=True)
    n.images.add("sha256:pause", 1 * MiB, ("registry.k8s.io/pause:3.10",))
    n.images.add("sha256:bb", 1 * MiB, ("docker.io/library/busybox:latest",))
    n.fill(90)
    with pytest.raises(ImageGCError):
        await n.gc.garbage_collect()
    assert n.present() == {"pinned"}  # no sandbox image given: pause is like any other

    for sandbox in ("registry.k8s.io/pause:3.10", "busybox", "sha256:bb"):
        m = Node(sandbox_image=sandbox, low_threshold_percent=0)
        m.images.add("sha256:pause", 1 * MiB, ("registry.k8s.io/pause:3.10",))
        m.images.add("sha256:bb", 1 * MiB, ("docker.io/library/busybox:latest",))
        m.fill(90)
        with pytest.raises(ImageGCError):
            await m.gc.garbage_collect()
        assert m.present() == ({"pause"} if "pause" in sandbox else {"bb"}), sandbox


async def test_invalid_capacity_is_an_event() -> None:
    n = Node()
    n.disk.capacity = 0
    n.disk.base = 0
    n.images.images.clear()
    with pytest.raises(ImageGCError, match="invalid capacity 0 on image filesystem"):
        await n.gc.garbage_collect()
    assert n.events == [
        ("Warning", "InvalidDiskCapacity", "invalid capacity 0 on image filesystem")
    ]


async def test_one_list_of_each_per_pass_and_records_follow_the_runtime() -> None:
    n = Node()
    await n.use("sha256:a")
    n.rt.calls.clear()
    n.fill(50)
    await n.gc.garbage_collect()
    assert [m for m, _ in n.rt.calls] == ["list_containers"]
    assert [m for m, _ in n.images.calls] == ["list_images", "image_fs_info"]
    assert n.gc.records["sha256:a"].last_used == 0.0
    assert n.gc.records["sha256:b"].last_used == float("-inf")
    del n.images.images["sha256:b"]
    await n.gc.garbage_collect()
    assert "sha256:b" not in n.gc.records


async def test_removal_errors_are_aggregated() -> None:
    n = Node(low_threshold_percent=0)
    n.fill(90)
    n.images.inject_error("remove_image", errors.CRIError("RemoveImage", "in use"), times=2)
    with pytest.raises(
        ImageGCError, match=r"with errors in image deletion: \[RemoveImage: in use, "
    ):
        await n.gc.garbage_collect()
    assert len(n.present()) == 2
    assert n.events == []  # upstream returns this error without FreeDiskSpaceFailed


async def test_run_reports_image_gc_failed_only_for_repeated_failures() -> None:
    n = Node()
    n.gc.period = 0.001
    n.images.inject_error("list_images", errors.UnavailableError("ListImages", "down"), times=3)
    stop = asyncio.Event()
    task = asyncio.create_task(n.gc.run(stop))
    for _ in range(500):
        if len(n.images.called("list_images")) >= 4:
            break
        await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, 5)
    failed = [e for e in n.events if e[1] == "ImageGCFailed"]
    assert failed[:2] == [("Warning", "ImageGCFailed", "ListImages: down")] * 2
    assert len(failed) == 2  # failures 2 and 3; the first and the later successes are quiet


async def test_gc_off_at_100_percent_without_max_age() -> None:
    n = Node(high_threshold_percent=100, low_threshold_percent=80)
    assert not n.gc.policy.enabled
    stop = asyncio.Event()
    task = asyncio.create_task(n.gc.run(stop))
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert n.images.calls == []
    assert ImageGCPolicy(high_threshold_percent=100, max_age=60).enabled


def test_policy_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"invalid HighThresholdPercent 101, must be in range"):
        ImageGCPolicy(high_threshold_percent=101)
    with pytest.raises(ValueError, match="LowThresholdPercent 90 can not be higher than"):
        ImageGCPolicy(high_threshold_percent=85, low_threshold_percent=90)


async def test_delete_unused_images_frees_everything_eligible() -> None:
    n = Node()
    await n.use("sha256:e")
    res = await n.gc.delete_unused_images()
    assert n.present() == {"e"} and res.freed == 400 * MiB


def test_from_config_reads_the_kubelet_configuration() -> None:
    from kubelet.apis.config import KubeletConfiguration

    cfg = KubeletConfiguration()
    cfg.image_maximum_gc_age = 3600.0
    m = ImageGCManager.from_config(cfg, DiskImages(Disk(1, 0)), FakeRuntimeService())
    assert m.policy == ImageGCPolicy(85, 80, 120.0, 3600.0)
