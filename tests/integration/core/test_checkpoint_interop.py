"""State files handed between kubelet-py and the Go kubelet, the other way
round from the unit tests: files this kubelet writes are read back by
upstream's own state code (pkg/kubelet/cm/{cpu,memory}manager/state of the
pinned module, run by hack/resmgr-vectors/gen.sh read), which verifies their
checksums and restores the same assignments. Needs Go and the module cache
(hack/build-control-plane.sh provides both)."""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from kubelet.cm.cpumanager.cpu_manager import Reservation, new_cpu_manager
from kubelet.cm.memorymanager.memory_manager import new_memory_manager
from kubelet.features import FeatureGate
from tests.unit.cm.fixtures import Affinity, GiB, Pods, gpod, machine
from tests.unit.cm.topologies import topology

REPO = Path(__file__).resolve().parents[3]
GEN = REPO / "hack" / "resmgr-vectors" / "gen.sh"


def upstream_reads(d: Path) -> tuple[dict, dict]:
    if shutil.which("go") is None:
        pytest.fail("Go is needed to run upstream's state code (hack/build-control-plane.sh)")
    r = subprocess.run(
        ["bash", str(GEN), "read", str(d)], capture_output=True, text=True, timeout=1500
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return (
        json.loads((d / "upstream-read-cpu.json").read_text()),
        json.loads((d / "upstream-read-memory.json").read_text()),
    )


@pytest.mark.slow
def test_upstream_reads_the_state_files_we_write(tmp_path: Path) -> None:
    pods = Pods()
    # 1. static CPU manager with two allocations and a release.
    cpu_dir = tmp_path / "cpu-static"
    cpu_dir.mkdir()
    m = new_cpu_manager("static", {}, 10.0, topology("DualSocketHT"), Reservation(cpu_millis=1000),
                        str(cpu_dir), Affinity(), FeatureGate(), pods, lambda: True)  # fmt: skip
    for uid, n in (("pod-a", "4"), ("pod-<b>&", "2"), ("gone", "1")):
        p = gpod(uid, [{"name": "app", "cpu": n}])
        pods.pods[uid] = p
        m.allocate(p, p["spec"]["containers"][0])
    del pods.pods["gone"]
    m.remove_stale_state()
    (cpu_dir / "policy").write_text("static")
    # 2. none policy (an empty state).
    none_dir = tmp_path / "cpu-none"
    none_dir.mkdir()
    new_cpu_manager("none", {}, 10.0, topology("DualSocketHT"), Reservation(), str(none_dir),
                    Affinity(), FeatureGate(), pods, lambda: True)  # fmt: skip
    (none_dir / "policy").write_text("none")
    # 3. the static memory manager with a group allocation.
    mem_dir = tmp_path / "mem-static"
    mem_dir.mkdir()
    aff = Affinity()
    mm = new_memory_manager("Static", machine(), {"memory": Decimal(GiB)},
                            [{"numaNode": 0, "limits": {"memory": "1Gi"}}], str(mem_dir), aff, pods,
                            lambda: True)  # fmt: skip
    big = gpod("pod-m", [{"name": "big", "cpu": "1"}])
    big["spec"]["containers"][0]["resources"]["limits"]["memory"] = "20Gi"
    big["spec"]["containers"][0]["resources"]["requests"]["memory"] = "20Gi"
    pods.pods["pod-m"] = big
    mm.allocate(big, big["spec"]["containers"][0])
    (mem_dir / "policy").write_text("Static")

    cpu, mem = upstream_reads(tmp_path)
    assert cpu["cpu-static"] == {
        "default": _fmt(m.state.get_default_cpuset()),
        "entries": {u: {"app": _fmt(m.exclusive_cpus(u, "app"))} for u in ("pod-a", "pod-<b>&")},
    }
    assert cpu["cpu-none"] == {"default": "", "entries": {}}
    got = mem["mem-static"]
    assert got["entries"] == {
        "pod-m": {"big": [{"numaAffinity": [0, 1], "type": "memory", "size": 20 * GiB}]}
    }
    assert got["machineState"]["0"]["cells"] == [0, 1]
    assert got["machineState"]["1"]["memoryMap"]["memory"]["reserved"] == 20 * GiB - (14 * GiB)


def _fmt(cpus: frozenset[int]) -> str:
    from kubelet.util.cpuset import format_cpus

    return format_cpus(cpus)
