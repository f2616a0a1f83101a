"""Pressure (KubeletPSI) and swap in /stats/summary and /metrics/cadvisor, from
fixture cgroup trees (v2, and a v1 hybrid host whose unified tree holds the
pressure files) and, for the node, this machine's real /proc/pressure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubelet import stats
from kubelet.container.runtime import ContainerStatus, PodStatus, SandboxStatus
from kubelet.nodestatus.machine import machine_info
from kubelet.stats import provider as prov
from kubelet.stats.cadvisor import cadvisor_registry

CID = "c" * 64
POD = "kubepods/burstable/podu1"
CPU_P = "some avg10=1.50 avg60=0.75 avg300=0.25 total=2500000\nfull avg10=0.50 avg60=0.10 avg300=0.00 total=1000000\n"  # fmt: skip
MEM_P = "some avg10=12.00 avg60=3.00 avg300=1.00 total=7000000\nfull avg10=10.00 avg60=2.00 avg300=0.50 total=6000000\n"  # fmt: skip
IO_P = "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"  # fmt: skip


def _pod() -> dict[str, Any]:
    spec = {"name": "app", "image": "busybox", "resources": {"requests": {"memory": "64Mi"}}}
    return {"metadata": {"uid": "u1", "name": "web", "namespace": "ns"}, "spec": {"containers": [spec]}}  # fmt: skip


def _status() -> PodStatus:
    return PodStatus(
        "u1",
        sandboxes=[SandboxStatus("s" * 64, True, 1_700_000_000 * 10**9, 0)],
        containers=[ContainerStatus(CID, "app", "running", started_at=1_700_000_005 * 10**9, image="b:1")],
    )  # fmt: skip


def _v2_cgroup(d: Path, swap: str, swap_max: str, pressure: bool = True) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.stat").write_text("usage_usec 100\n")
    (d / "memory.current").write_text("5000\n")
    (d / "memory.stat").write_text("anon 3000\ninactive_file 100\n")
    (d / "memory.swap.current").write_text(swap)
    (d / "memory.swap.max").write_text(swap_max)
    if pressure:
        (d / "cpu.pressure").write_text(CPU_P)
        (d / "memory.pressure").write_text(MEM_P)
        (d / "io.pressure").write_text(IO_P)


def _v2_provider(tmp_path: Path, psi: bool) -> prov.StatsProvider:
    root = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    _v2_cgroup(root / POD, "4096\n", "max\n")
    _v2_cgroup(root / POD / CID, "1024\n", "8192\n")
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    for res, text in (("cpu", CPU_P), ("memory", MEM_P), ("io", IO_P)):
        (pressure / res).write_text(text)
    return prov.StatsProvider(
        lambda: [_pod()], str(tmp_path), "n", mountinfo=str(mountinfo),
        pod_status=lambda u: _status(), psi=psi, proc_pressure=str(pressure),
    )  # fmt: skip


CPU_PSI = {
    "full": {"total": 1000000, "avg10": 0.5, "avg60": 0.1, "avg300": 0.0},
    "some": {"total": 2500000, "avg10": 1.5, "avg60": 0.75, "avg300": 0.25},
}


def test_summary_has_pressure_and_swap_as_the_v1alpha1_api(tmp_path: Path) -> None:
    s = _v2_provider(tmp_path, psi=True).summary()
    (pod,) = s["pods"]
    (ctr,) = pod["containers"]
    for x in (pod, ctr, s["node"]):
        assert x["cpu"]["psi"] == CPU_PSI
        assert x["memory"]["psi"]["full"] == {
            "total": 6000000, "avg10": 10.0, "avg60": 2.0, "avg300": 0.5
        }  # fmt: skip
        assert x["io"]["psi"]["some"]["total"] == 42 and x["io"]["time"] == x["cpu"]["time"]
    # Swap: usage; available only under a limit (the pod's is "max").
    assert pod["swap"] == {"time": pod["cpu"]["time"], "swapUsageBytes": 4096}
    assert ctr["swap"] == {
        "time": ctr["cpu"]["time"], "swapUsageBytes": 1024, "swapAvailableBytes": 8192 - 1024
    }  # fmt: skip
    # The node's swap is /proc/meminfo's.
    mi = stats.read_meminfo()
    assert mi is not None and mi["SwapTotal"] is not None and mi["SwapFree"] is not None
    assert s["node"]["swap"]["swapAvailableBytes"] == mi["SwapFree"]
    assert s["node"]["swap"]["swapUsageBytes"] == mi["SwapTotal"] - mi["SwapFree"]


def test_psi_gate_off_leaves_pressure_out_and_reads_no_pressure_file(tmp_path: Path) -> None:
    p = _v2_provider(tmp_path, psi=False)
    s = p.summary()
    (pod,) = s["pods"]
    for x in (pod, pod["containers"][0], s["node"]):
        assert "psi" not in x["cpu"] and "psi" not in x["memory"] and "io" not in x
    assert "swap" in pod  # swap does not hang on the gate
    text = generate_latest(cadvisor_registry(p, machine_info())).decode()
    assert "container_pressure" not in text


def test_a_cgroup_without_pressure_files_has_no_psi_not_zeros(tmp_path: Path) -> None:
    p = _v2_provider(tmp_path, psi=True)
    for f in ("cpu.pressure", "memory.pressure", "io.pressure"):
        os.unlink(tmp_path / "cg" / POD / CID / f)
    (pod,) = p.summary()["pods"]
    assert pod["cpu"]["psi"] == CPU_PSI
    ctr = pod["containers"][0]
    assert "psi" not in ctr["cpu"] and "io" not in ctr


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("id", "")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_cadvisor_pressure_counters_and_swap(tmp_path: Path) -> None:
    p = _v2_provider(tmp_path, psi=True)
    got = _samples(generate_latest(cadvisor_registry(p, machine_info())).decode())
    cid = f"/{POD}/{CID}"
    assert got[("container_pressure_cpu_waiting_seconds_total", cid)] == 2.5
    assert got[("container_pressure_cpu_stalled_seconds_total", cid)] == 1.0
    assert got[("container_pressure_memory_waiting_seconds_total", cid)] == 7.0
    assert got[("container_pressure_memory_stalled_seconds_total", cid)] == 6.0
    assert got[("container_pressure_io_waiting_seconds_total", cid)] == 42e-6
    assert got[("container_pressure_io_stalled_seconds_total", cid)] == 0.0
    assert got[("container_memory_swap", cid)] == 1024
    assert got[("container_spec_memory_swap_limit_bytes", cid)] == 8192
    assert got[("container_spec_memory_swap_limit_bytes", f"/{POD}")] == 0  # "max", as cAdvisor


@pytest.mark.parametrize("impl", ["native", "reference"])
def test_v1_hybrid_host_reads_pressure_from_the_unified_tree(tmp_path: Path, impl: str) -> None:
    """A cgroup v1 host with the unified tree mounted (this machine): runc makes
    each cgroup there too, with its pressure files; swap is memory.stat's
    total_swap and the memsw limit."""
    mod = stats.reference if impl == "reference" else stats.native
    if mod is None:
        pytest.skip("the native module is not built")
    root = tmp_path
    mem = root / "memory" / POD
    mem.mkdir(parents=True)
    (mem / "memory.stat").write_text("total_rss 10\ntotal_swap 300\nswap 7\n")
    (mem / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    uni = root / "unified" / POD
    uni.mkdir(parents=True)
    (uni / "cpu.pressure").write_text(CPU_P)
    (uni / "memory.pressure").write_text("garbage\n")
    (st,) = mod.parse_cgroups([POD], 1, str(root))
    assert st.swap_usage == 300 and st.swap_limit is None  # at or past 2**62: no limit
    assert st.cpu_pressure == ((1.5, 0.75, 0.25, 2500000), (0.5, 0.1, 0.0, 1000000))
    assert st.memory_pressure == (None, None)  # a file, but no valid line
    assert st.io_pressure is None  # no file
    (mem / "memory.memsw.limit_in_bytes").write_text("67108864\n")
    (st,) = mod.parse_cgroups([POD], 1, str(root), fields=frozenset({"swap_limit"}))
    assert st.swap_limit == 67108864 and st.swap_usage is None and st.memory_rss is None


def test_node_pressure_is_read_for_real_from_proc() -> None:
    """This kernel has PSI: the node's pressure parses from /proc/pressure."""
    if not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("kernel without PSI")
    for res in ("cpu", "memory", "io"):
        p = stats.read_psi(f"/proc/pressure/{res}")
        assert p is not None and p[0] is not None, res
        some = p[0]
        assert all(0.0 <= a <= 100.0 for a in some[:3]) and some[3] >= 0
