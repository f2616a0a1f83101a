"""The stats provider on a generated cgroup v2 tree: pods found by their kubepods
path, CPU rates from consecutive samples, /metrics/resource series."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

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
    assert p.summary() is s  # cached within a second
    (root / "kubepods/burstable/podu1/cpu.stat").write_text("usage_usec 501000\n")
    t[0] += 2.0
    s2 = p.summary()
    a = next(x for x in s2["pods"] if x["podRef"]["name"] == "a")
    assert a["cpu"]["usageNanoCores"] == 250_000_000  # 0.5 s of CPU over 2 s
    text = generate_latest(prov.resource_registry(p)).decode()
    assert 'pod_memory_working_set_bytes{namespace="ns",pod="a"} 700.0' in text
    assert "node_cpu_usage_seconds_total" in text
