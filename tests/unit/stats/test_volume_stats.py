"""Per-pod volume usage: what du -x and statvfs say, for the pod's own volumes."""

from __future__ import annotations

import os
from pathlib import Path

from kubelet.stats.volumes import VolumeStatsCalculator, du, measure_pods
from kubelet.volume.atomic_writer import AtomicWriter, FileProjection


def test_own_volumes_are_measured_without_following_links(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    vols = pods / "u1" / "volumes"
    empty = vols / "kubernetes.io~empty-dir" / "scratch"
    empty.mkdir(parents=True)
    (empty / "blob").write_bytes(os.urandom(256 * 1024))
    cm = vols / "kubernetes.io~configmap" / "cfg"
    cm.mkdir(parents=True)
    AtomicWriter(str(cm)).write({"a": FileProjection(b"x" * 10000), "b": FileProjection(b"y")})
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "big").write_bytes(os.urandom(1024 * 1024))

    got = measure_pods(str(pods), {"u1": {"scratch": str(empty), "cfg": str(cm), "hp": str(host)}})
    by_name = {v.name: v for v in got["u1"]}
    assert set(by_name) == {"cfg", "scratch"}  # hostPath is the node's, not the pod's
    assert 256 * 1024 <= by_name["scratch"].used_bytes < 512 * 1024
    assert by_name["scratch"].inodes_used == 2
    # ..data and the user-visible names are links: the two files count once.
    assert 10000 <= by_name["cfg"].used_bytes < 64 * 1024
    fs = os.statvfs(empty)
    assert by_name["scratch"].capacity_bytes == fs.f_blocks * fs.f_frsize


def test_each_walk_is_timed_as_upstreams_du_source(tmp_path: Path) -> None:
    from kubelet.metrics import REGISTRY

    timed = ("kubelet_volume_metric_collection_duration_seconds_count", {"metric_source": "du"})
    v = tmp_path / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir"
    (v / "a").mkdir(parents=True)
    (v / "b").mkdir()
    before = REGISTRY.get_sample_value(*timed) or 0.0
    measure_pods(str(tmp_path / "pods"), {"u1": {"a": str(v / "a"), "b": str(v / "b")}})
    assert REGISTRY.get_sample_value(*timed) == before + 2


def test_du_of_a_missing_path_is_zero(tmp_path: Path) -> None:
    assert du(str(tmp_path / "nope")) == (0, 0)


async def test_the_calculator_serves_its_last_pass(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    v = pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "e"
    v.mkdir(parents=True)
    uids = ["u1"]
    calc = VolumeStatsCalculator(lambda: uids, lambda u: {"e": str(v)}, str(pods))
    assert calc.usage("u1") == []
    await calc.refresh()
    before = calc.usage("u1")[0].used_bytes
    (v / "f").write_bytes(b"z" * 100_000)
    assert calc.usage("u1")[0].used_bytes == before  # cached until the next pass
    await calc.refresh()
    assert calc.usage("u1")[0].used_bytes >= before + 100_000
    calc.forget("u1")  # removed from the node: gone before the next pass
    assert calc.usage("u1") == []
    uids.clear()
    await calc.refresh()
    assert calc.usage("u1") == []  # a removed pod's figures go


async def test_a_negative_period_turns_measuring_off(tmp_path: Path) -> None:
    """volumeStatsAggPeriod below zero: nothing is measured (run returns at once)."""
    import asyncio

    asked: list[str] = []

    def uids() -> list[str]:
        asked.append("uids")
        return ["u1"]

    calc = VolumeStatsCalculator(uids, lambda _u: {}, str(tmp_path), period=-1)
    await asyncio.wait_for(calc.run(asyncio.Event()), 5)
    assert asked == [] and calc.usage("u1") == []


async def test_claims_on_metrics_once_each_with_their_figures(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from kubelet.stats.volumes import VolumeStatsCollector

    pods = tmp_path / "pods"
    dirs = {}
    for uid, vol in (("u1", "data"), ("u2", "shared"), ("u3", "shared"), ("u3", "scratch")):
        d = pods / uid / "volumes" / "kubernetes.io~empty-dir" / vol
        d.mkdir(parents=True)
        dirs.setdefault(uid, {})[vol] = str(d)
    (pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "data" / "f").write_bytes(b"x" * 8192)
    claims = {"u1": {"data": ("ns", "c1")}, "u2": {"shared": ("ns", "c2")},
              "u3": {"shared": ("ns", "c2")}}  # fmt: skip
    calc = VolumeStatsCalculator(
        lambda: list(dirs), lambda u: dirs[u], str(pods), claims=lambda u: claims.get(u, {})
    )
    registry = CollectorRegistry()
    registry.register(VolumeStatsCollector(calc.claims_usage))
    assert generate_latest(registry) == b""  # nothing measured yet: no family at all
    await calc.refresh()
    text = generate_latest(registry).decode()
    used = [
        line for line in text.splitlines() if line.startswith("kubelet_volume_stats_used_bytes")
    ]
    # Two claims (c2 is shared by two pods: one series); the unclaimed scratch dir is absent.
    assert len(used) == 2
    c1 = next(line for line in used if 'persistentvolumeclaim="c1"' in line)
    assert 'namespace="ns"' in c1 and float(c1.split()[-1]) >= 8192
    assert "kubelet_volume_stats_inodes_free{" in text
    # No driver said anything of health: no health series.
    assert "kubelet_volume_stats_health_status_abnormal{" not in text
