"""PID pressure ranks pods as upstream's rankPIDPressure: lower priority first,
then more processes; the counts are each pod cgroup's pids.current."""

from __future__ import annotations

from pathlib import Path

from kubelet.eviction import signals as sig
from kubelet.eviction.eviction_manager import (
    EvictionManager,
    EvictionSources,
    Observation,
    volumes_only,
)
from kubelet.stats import provider as prov
from tests.unit.eviction.helpers import Harness, pod


async def test_pid_pressure_evicts_by_priority_then_process_count() -> None:
    h = Harness(eviction_hard={"pid.available": "10%"})
    h.pods = [pod("many", priority=1000), pod("few"), pod("more"), pod("static", static=True)]
    h.usage = {"few": 10 * 2**30}  # memory would pick "few"
    processes = {"many": 5000, "few": 10, "more": 400, "static": 9000}
    sources = EvictionSources(
        lambda: list(h.pods), lambda: {sig.PID: Observation(100, 32768)}, lambda: h.usage,
        volumes_only(lambda _u: {}), processes=lambda: processes,
    )  # fmt: skip
    m = EvictionManager(h.config, "/", sources, h.m.evict, clock=lambda: h.now)
    for _ in range(4):
        await m.synchronize()
    assert [e[0] for e in h.evictions] == ["more", "few", "many"]
    assert h.evictions[0][3].startswith("The node was low on resource: pids. ")
    assert "available: 100." in h.evictions[0][3]  # a count, not Ki


def test_provider_counts_each_pods_tasks(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    pods = [
        {"metadata": {"uid": u, "name": u, "namespace": "ns"}, "spec": {"containers": [{}]}}
        for u in ("u1", "u2", "u3")
    ]
    for u, n in (("u1", 12), ("u2", 3)):
        d = root / f"kubepods/besteffort/pod{u}"
        d.mkdir(parents=True)
        (d / "pids.current").write_text(f"{n}\n")
    p = prov.StatsProvider(lambda: pods, str(tmp_path), "n", mountinfo=str(mountinfo))
    assert p.pod_process_counts() == {"u1": 12, "u2": 3}  # u3 has no cgroup
