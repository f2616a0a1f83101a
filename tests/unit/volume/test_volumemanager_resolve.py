"""The volume manager hands a claim to the plugin of its PV (resolve), sets
it up in the dir that plugin names, and after a restart adopts such a dir
found on disk instead of tearing it down under the running pod."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from kubelet.volume import VolumeError
from kubelet.volumemanager import MountedVolume
from kubelet.volumemanager.hooks import Resolution
from tests.unit.volume.fixtures import Env, mkpod


class Claims:
    """Serves `claim` volumes by handing them to test/dirmount as the PV named."""

    name = "test/claim"
    requires_remount = False

    def __init__(self) -> None:
        self.resolves: list[str] = []
        self.fail: str = ""
        self.gate: asyncio.Event | None = None

    def can_support(self, spec: dict[str, Any]) -> bool:
        return "claim" in spec

    async def resolve(self, pod: dict[str, Any], spec: dict[str, Any]) -> Resolution | None:
        self.resolves.append(spec["name"])
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise VolumeError(self.fail)
        pv = spec["claim"]["pv"]
        return Resolution("test/dirmount", pv, {"name": spec["name"], "pv": pv})

    async def set_up(self, pod: dict[str, Any], spec: dict[str, Any], dir: str) -> None:
        raise AssertionError("a resolved claim is never set up by the claim plugin")

    async def set_up_volume(self, pod: dict[str, Any], spec: dict[str, Any], dir: str) -> Any:
        raise AssertionError("a resolved claim is never set up by the claim plugin")

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        return None


class DirMount:
    """Mounts (makes) `<dir>/mount`; adopts the dirs listed in `adoptable`."""

    name = "test/dirmount"
    requires_remount = False
    read_only = False

    def __init__(self) -> None:
        self.set_ups: list[tuple[str, bool]] = []
        self.tear_downs: list[str] = []
        self.adoptable: set[str] = set()
        self.gate: asyncio.Event | None = None
        self.fail = ""
        self.fail_operation = ""

    def can_support(self, spec: dict[str, Any]) -> bool:
        return "pv" in spec

    async def set_up(self, pod: dict[str, Any], spec: dict[str, Any], dir: str) -> None:
        raise AssertionError("set_up_at is the entry point")

    async def set_up_at(
        self, pod: dict[str, Any], spec: dict[str, Any], dir: str, remount: bool
    ) -> MountedVolume:
        self.set_ups.append((os.path.basename(dir), remount))
        if self.gate is not None:
            await self.gate.wait()
        os.makedirs(os.path.join(dir, "mount"), exist_ok=True)
        if self.fail:
            raise VolumeError(self.fail, self.fail_operation)
        return MountedVolume(spec["name"], os.path.join(dir, "mount"), read_only=True)

    def adopt(self, spec: dict[str, Any], dir: str) -> MountedVolume | None:
        if dir not in self.adoptable:
            return None
        return MountedVolume(spec["name"], os.path.join(dir, "mount"), read_only=True)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        self.tear_downs.append(spec_name)
        shutil.rmtree(dir, ignore_errors=True)


def claim(name: str, pv: str) -> dict[str, Any]:
    return {"name": name, "claim": {"pv": pv}}


def env_with(tmp_path: Path) -> tuple[Env, Claims, DirMount]:
    claims, dm = Claims(), DirMount()
    return Env(tmp_path, claims, dm), claims, dm


def pv_dir(root: Path, uid: str, pv: str) -> Path:
    return root / "pods" / uid / "volumes" / "test~dirmount" / pv


async def test_claim_set_up_in_the_dir_of_its_pv(tmp_path: Path):
    env, claims, dm = env_with(tmp_path)
    pod = mkpod("a", claim("data", "pv-1"))
    env.mgr.add_pod(pod)
    await env.settle()
    assert claims.resolves == ["data"]
    assert dm.set_ups == [("pv-1", False)]
    mounted = env.mgr.get_mounted_volumes("a")["data"]
    assert mounted.host_path == str(pv_dir(tmp_path, "a", "pv-1") / "mount")
    assert mounted.read_only
    assert env.ready == ["a"]
    env.mgr.remove_pod("a")
    await env.settle()
    assert dm.tear_downs == ["pv-1"]
    assert not pv_dir(tmp_path, "a", "pv-1").exists()
    assert await env.mgr.wait_for_unmount("a", 1)


async def test_resolution_failure_is_an_event_and_retried(tmp_path: Path):
    env, claims, dm = env_with(tmp_path)
    claims.fail = 'PVC ns/c has non-bound phase ("Pending")'
    pod = mkpod("a", claim("data", "pv-1"))
    env.mgr.add_pod(pod)
    await env.settle()
    assert env.messages() == [
        'MountVolume.SetUp failed for volume "data" : PVC ns/c has non-bound phase ("Pending")'
    ]
    assert dm.set_ups == [] and env.mgr.unmounted_volumes(pod) == ["data"]
    claims.fail = ""
    await env.step(0.1)  # the first back-off of a resolution (RESOLVE_BACKOFF)
    assert dm.set_ups == [("pv-1", False)]
    assert env.ready == ["a"]


async def test_dir_found_on_disk_waits_for_resolution_then_is_adopted(tmp_path: Path):
    found = pv_dir(tmp_path, "a", "pv-1")
    (found / "mount").mkdir(parents=True)
    env, claims, dm = env_with(tmp_path)
    dm.adoptable.add(str(found))
    await env.mgr.reconstruct()
    claims.gate = asyncio.Event()
    pod = mkpod("a", claim("data", "pv-1"))
    env.mgr.add_pod(pod)
    for _ in range(5):
        env.mgr.reconcile()
        await asyncio.sleep(0.001)
    # The claim is not resolved yet: the dir may be its volume, so it stays.
    assert dm.tear_downs == [] and found.exists()
    claims.gate.set()
    await env.settle()
    assert dm.set_ups == [] and dm.tear_downs == []  # adopted as it was
    assert env.mgr.get_mounted_volumes("a")["data"].host_path == str(found / "mount")
    assert env.ready == ["a"]


async def test_found_dir_that_cannot_be_adopted_is_set_up_again(tmp_path: Path):
    found = pv_dir(tmp_path, "a", "pv-1")
    found.mkdir(parents=True)
    env, _claims, dm = env_with(tmp_path)
    await env.mgr.reconstruct()
    env.mgr.add_pod(mkpod("a", claim("data", "pv-1")))
    await env.settle()
    assert dm.tear_downs == [] and dm.set_ups == [("pv-1", False)]
    assert env.ready == ["a"]


async def test_found_dir_of_a_volume_the_pod_no_longer_has_is_torn_down(tmp_path: Path):
    stale = pv_dir(tmp_path, "a", "pv-old")
    stale.mkdir(parents=True)
    env, _claims, dm = env_with(tmp_path)
    await env.mgr.reconstruct()
    env.mgr.add_pod(mkpod("a", claim("data", "pv-1")))
    await env.settle()
    assert dm.tear_downs == ["pv-old"] and not stale.exists()
    assert dm.set_ups == [("pv-1", False)]


async def test_two_claims_resolving_to_one_dir(tmp_path: Path):
    env, _claims, dm = env_with(tmp_path)
    pod = mkpod("a", claim("one", "pv-1"), claim("two", "pv-1"))
    env.mgr.add_pod(pod)
    await env.settle()
    assert dm.set_ups == [("pv-1", False)]
    assert env.messages() == [
        'MountVolume.SetUp failed for volume "two" : volume two and volume one use the '
        "same directory pv-1"
    ]
    assert env.mgr.unmounted_volumes(pod) == ["two"]


async def test_tear_down_waits_for_a_set_up_in_flight(tmp_path: Path):
    """Set-up and tear-down of one dir share an operation key after resolution:
    a pod removed while its volume is being mounted again (after a failed
    attempt left it uncertain) is unmounted afterwards, never concurrently."""
    env, _claims, dm = env_with(tmp_path)
    dm.fail = "timed out"
    env.mgr.add_pod(mkpod("a", claim("data", "pv-1")))
    await env.settle()
    assert dm.set_ups == [("pv-1", False)]
    dm.fail, dm.gate = "", asyncio.Event()
    env.clock.step(0.5)
    for _ in range(10):
        env.mgr.reconcile()
        await asyncio.sleep(0.001)
    assert dm.set_ups == [("pv-1", False), ("pv-1", False)]
    env.mgr.remove_pod("a")
    for _ in range(10):
        env.mgr.reconcile()
        await asyncio.sleep(0.001)
    assert dm.tear_downs == []
    dm.gate.set()
    await env.settle()
    assert dm.tear_downs == ["pv-1"]
    assert not pv_dir(tmp_path, "a", "pv-1").exists()


async def test_set_up_failure_of_a_resolved_claim_names_the_pv(tmp_path: Path):
    # Upstream's event names the volume spec, which for a claim is its PV;
    # the operation is the plugin's (MapVolume.* for a raw block volume).
    env, _claims, dm = env_with(tmp_path)
    dm.fail = "driver says no"
    pod = mkpod("a", claim("data", "pv-1"))
    env.mgr.add_pod(pod)
    await env.settle()
    assert env.messages() == ['MountVolume.SetUp failed for volume "pv-1" : driver says no']
    dm.fail, dm.fail_operation = "no device", "MapVolume.MapPodDevice"
    await env.step(0.5)
    assert env.messages()[-1] == 'MapVolume.MapPodDevice failed for volume "pv-1" : no device'
