"""The volume manager's reconstruction, forced clean-up and orphaned pod
counters, as upstream counts them (volumemanager/metrics, kubelet_volumes.go)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubelet.metrics import REGISTRY
from kubelet.volume import VolumeError
from kubelet.volumemanager import manager as manager_mod
from tests.unit.volume.fixtures import Env

NAMES = (
    "reconstruct_volume_operations_total",
    "reconstruct_volume_operations_errors_total",
    "force_cleaned_failed_volume_operations_total",
    "force_cleaned_failed_volume_operation_errors_total",
)


def counts() -> dict[str, float]:
    return {n: REGISTRY.get_sample_value(n) or 0.0 for n in NAMES}


def moved(before: dict[str, float]) -> list[float]:
    now = counts()
    return [now[n] - before[n] for n in NAMES]


def orphans() -> tuple[float | None, float | None]:
    return (
        REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes"),
        REGISTRY.get_sample_value("kubelet_orphan_pod_cleaned_volumes_errors"),
    )


def volume_dir(root: Path, uid: str, plugin: str, name: str) -> Path:
    d = root / "pods" / uid / "volumes" / plugin / name
    d.mkdir(parents=True)
    return d


async def drain(env: Env) -> None:
    for _ in range(3):  # tear-downs finish in the executor
        await env.settle()
        await asyncio.sleep(0.05)


async def test_reconstruction_and_forced_clean_up_are_counted(tmp_path: Path) -> None:
    volume_dir(tmp_path, "a", "test~fake", "v")  # a plugin this kubelet has
    unknown = volume_dir(tmp_path, "b", "kubernetes.io~nfs", "w")  # one it has not
    # subPath mounts left of a hostPath volume are no volume dir: not counted
    (tmp_path / "pods" / "c" / "volume-subpaths" / "h" / "ctr" / "0").mkdir(parents=True)
    before = counts()
    env = Env(tmp_path)
    await env.mgr.reconstruct()
    assert moved(before) == [2, 1, 0, 0]
    await env.mgr.reconstruct()  # what is in the actual state already is not again
    assert moved(before) == [2, 1, 0, 0]
    assert await env.mgr.cleanup_orphaned_pods({"a", "c"}) == []
    await drain(env)
    assert not unknown.exists()
    assert moved(before) == [2, 1, 1, 0]  # only the dir that failed reconstruction


async def test_a_failed_forced_clean_up_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume_dir(tmp_path, "b", "kubernetes.io~nfs", "w")

    async def failing(*_args: object) -> None:
        raise VolumeError("device or resource busy")

    monkeypatch.setattr(manager_mod, "tear_down", failing)
    before = counts()
    env = Env(tmp_path)
    await env.mgr.reconstruct()
    await env.mgr.cleanup_orphaned_pods(set())
    await drain(env)
    await env.step(600)  # past the back-off: retried, not counted again
    await drain(env)
    assert moved(before) == [1, 1, 1, 1]


async def test_orphaned_pod_gauges_follow_each_sweep(tmp_path: Path) -> None:
    volume_dir(tmp_path, "gone", "test~fake", "v")
    (tmp_path / "pods" / "empty").mkdir(parents=True)  # no volumes: removable at once
    volume_dir(tmp_path, "kept", "test~fake", "v")
    env = Env(tmp_path)
    await env.mgr.reconstruct()
    assert sorted(await env.mgr.cleanup_orphaned_pods({"kept"})) == ["empty"]
    assert orphans() == (2, 1)  # "gone" still holds a volume
    await drain(env)
    assert sorted(await env.mgr.cleanup_orphaned_pods({"kept"})) == ["empty", "gone"]
    assert orphans() == (2, 0)
    (tmp_path / "pods" / "empty").rmdir()  # as the kubelet removes it
    assert await env.mgr.cleanup_orphaned_pods({"kept", "gone"}) == []
    assert orphans() == (0, 0)
