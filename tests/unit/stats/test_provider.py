"""The stats provider on a generated cgroup v2 tree: pods found by their kubepods
path, CPU rates from consecutive samples, /metrics/resource series."""

from __future__ import annotations

import shutil
from pathlib import Path

from prometheus_client import generate_latest

from kubelet import stats
from kubelet.stats import provider as prov


def pod(uid: str, name: str, qos_cpu: str | None) -> dict:
    res = {"requests": {"cpu": qos_cpu}} if qos_cpu else {}
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]},
    }


def test_summary_and_resource_metrics(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    pods = [pod("u1", "a", "100m"), pod("u2", "b", None), pod("u3", "not-made", None)]
    for rel, usec in (("kubepods/burstable/podu1", 1000), ("kubepods/besteffort/podu2", 50)):
        d = root / rel
        d.mkdir(parents=True)
        (d / "cpu.stat").write_text(f"usage_usec {usec}\n")
        (d / "memory.current").write_text("1000\n")
        (d / "memory.stat").write_text("anon 600\ninactive_file 300\n")
    t = [100.0]
    monkeypatch.setattr(prov.time, "monotonic", lambda: t[0])
    p = prov.StatsProvider(lambda: pods, str(tmp_path), "node-x", mountinfo=str(mountinfo))
    s = p.summary()
    got = {x["podRef"]["name"]: x for x in s["pods"]}
    assert set(got) == {"a", "b"}  # no cgroup, no entry
    assert got["a"]["cpu"]["usageCoreNanoSeconds"] == 1_000_000
    assert got["a"]["cpu"]["usageNanoCores"] is None  # one sample: no rate yet
    assert got["a"]["memory"]["workingSetBytes"] == 700
    assert s["node"]["nodeName"] == "node-x" and s["node"]["memory"]["workingSetBytes"] > 0
    # RlimitStats, which upstream's PID eviction specs read before they start.
    assert s["node"]["rlimit"]["maxpid"] > 0 and s["node"]["rlimit"]["curproc"] > 0
    assert p.summary() is s  # cached within a second
    (root / "kubepods/burstable/podu1/cpu.stat").write_text("usage_usec 501000\n")
    t[0] += 2.0
    s2 = p.summary()
    a = next(x for x in s2["pods"] if x["podRef"]["name"] == "a")
    assert a["cpu"]["usageNanoCores"] == 250_000_000  # 0.5 s of CPU over 2 s
    text = generate_latest(prov.resource_registry(p)).decode()
    assert 'pod_memory_working_set_bytes{namespace="ns",pod="a"} 700.0' in text
    assert "node_cpu_usage_seconds_total" in text


def test_each_consumer_reads_its_files_through_kept_descriptors(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Eviction reads only memory.current and memory.stat; a collection reads its
    fields; a pod cgroup removed and made again is read anew, never through a
    descriptor of the old one; a pod that is gone gives its descriptors back."""
    root = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    pods = [pod("u1", "a", None), pod("u2", "b", None)]

    def make(rel: str, current: int, cpu: str = "usage_usec 7\n") -> None:
        d = root / rel
        d.mkdir(parents=True)
        (d / "cpu.stat").write_text(cpu)
        (d / "memory.current").write_text(f"{current}\n")
        (d / "memory.stat").write_text("anon 600\ninactive_file 300\n")

    make("kubepods/besteffort/podu1", 1000, cpu="garbage")
    make("kubepods/besteffort/podu2", 2000)
    t = [100.0]
    monkeypatch.setattr(prov.time, "monotonic", lambda: t[0])
    p = prov.StatsProvider(lambda: pods, str(tmp_path), "n", mountinfo=str(mountinfo))
    assert p.pod_working_sets() == {"u1": 700, "u2": 1700}
    assert p.kept_cgroups == 2
    # Removed and made again with other values between two passes.
    shutil.rmtree(root / "kubepods/besteffort/podu1")
    make("kubepods/besteffort/podu1", 5000)
    t[0] += 10
    assert p.pod_working_sets() == {"u1": 4700, "u2": 1700}
    # The resource collection sees the new cgroup's cpu.stat too.
    t[0] += 10
    s, _, _ = p.snapshot(prov.RESOURCE_METRICS)
    cpu = {x["podRef"]["uid"]: x["cpu"]["usageCoreNanoSeconds"] for x in s["pods"]}
    assert cpu == {"u1": 7000, "u2": 7000}
    assert all(x["memory"]["usageBytes"] is None for x in s["pods"])  # not asked for
    # Within the second, a summary needs more fields: a new collection.
    s2 = p.summary()
    assert s2 is not s and {x["memory"]["usageBytes"] for x in s2["pods"]} == {5000, 2000}
    assert p.summary() is s2 and p.snapshot(prov.RESOURCE_METRICS)[0] is s2
    pods.pop(0)
    t[0] += 10
    assert p.pod_working_sets() == {"u2": 1700}
    assert p.kept_cgroups == 1


def test_node_memory_is_the_root_cgroups_as_eviction_reads_it(tmp_path: Path) -> None:
    """The node's memory in the summary is the root cgroup's working set (the v2
    root has no memory.current: anon + file less inactive_file), as upstream's
    summary and eviction's memory.available read it, not MemTotal - MemAvailable."""
    root = tmp_path / "cg"
    root.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    (root / "memory.stat").write_text("anon 5000\nfile 3000\ninactive_file 1000\n")
    p = prov.StatsProvider(lambda: [], str(tmp_path), "node-x", mountinfo=str(mountinfo))
    mem = p.summary()["node"]["memory"]
    total = stats.read_meminfo()["MemTotal"]
    assert mem["workingSetBytes"] == 7000
    assert mem["usageBytes"] == 8000
    assert mem["availableBytes"] == total - 7000
