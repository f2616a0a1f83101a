"""Node allocatable, reserved cgroups and system containers on this host's real
cgroupfs, every cgroup private to the test (a root of its own; no other
process of the machine is touched); kernel tunables and /proc/swaps come from
fixtures so the host's sysctls are never written."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.cgroup_manager import CgroupManager
from kubelet.cm.container_manager import ContainerManager, HostPaths, NodeConfig
from kubelet.cm.system_containers import container_of, ensure_process_in_container
from kubelet.util.oom import OOMAdjuster
from kubelet.util.sysctl import DESIRED_KERNEL_TUNABLES

GiB, MiB = 1 << 30, 1 << 20


@pytest.fixture
def private_root() -> Iterator[str]:
    """/kpy-knobs-<pid>-<n> in every hierarchy, removed (deepest first) after."""
    name = f"kpy-knobs-{os.getpid()}-{time.monotonic_ns() % 100000}"
    mgr = CgroupManager("")
    mgr.create(name)
    try:
        yield name
    finally:
        for _ctrl, path in mgr._paths(name):
            for dirpath, _d, _f in sorted(os.walk(path), key=lambda t: -len(t[0])):
                os.rmdir(dirpath)


def fixture_host(tmp: Path, system_root: str) -> HostPaths:
    sysctl = tmp / "proc-sys"
    for name, want in DESIRED_KERNEL_TUNABLES:
        (sysctl / name).parent.mkdir(parents=True, exist_ok=True)
        (sysctl / name).write_text(f"{want}\n")
    (sysctl / "kernel/pid_max").write_text("32768\n")
    (tmp / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n")
    return HostPaths(
        proc_swaps=str(tmp / "swaps"),
        proc_sys=str(sysctl),
        systemd_runtime_dir=str(tmp / "none"),
        system_root_cgroup=system_root,
    )


def read(ctrl: str, rel: str, f: str) -> str:
    return Path(f"/sys/fs/cgroup/{ctrl}/{rel}/{f}").read_text().strip()


def test_enforcement_on_real_cgroups(private_root: str, tmp_path: Path) -> None:
    cfg = KubeletConfiguration()
    cfg.cgroup_root = f"/{private_root}"
    cfg.enforce_node_allocatable = ["pods", "kube-reserved", "system-reserved-compressible"]
    cfg.kube_reserved = {"memory": "512Mi", "cpu": "500m", "pid": "1000"}
    cfg.system_reserved = {"memory": "1Gi", "cpu": "250m"}
    cfg.kube_reserved_cgroup = f"/{private_root}/kube"
    cfg.system_reserved_cgroup = f"/{private_root}/system"
    cfg.system_cgroups = f"/{private_root}/system"
    host = fixture_host(tmp_path, f"/{private_root}")
    mgr = CgroupManager("")
    mgr.create(f"{private_root}/kube")  # reserved cgroups must exist beforehand
    # A stand-in for the host's other processes, in the private "root".
    other = subprocess.Popen(["sleep", "300"])
    try:
        mgr.attach(private_root, other.pid)
        events: list[tuple[str, str, str]] = []
        cm = ContainerManager(
            NodeConfig.from_config(cfg, "node-a"),
            {"cpu": 2000, "memory": 8 * GiB},
            host=host,
            node_event=lambda *e: events.append(e),
        )
        # system-reserved-compressible needs its cgroup: it does not exist yet.
        with pytest.raises(Exception, match=r"System Reserved Compressible.*missing paths"):
            cm.start()
        mgr.create(f"{private_root}/system")
        cm.start()
        kubepods = f"{private_root}/kubepods"
        # kubepods: capacity minus both reservations; pids: pid_max minus the pid reservation.
        assert int(read("memory", kubepods, "memory.limit_in_bytes")) == 8 * GiB - 1536 * MiB
        assert read("cpu", kubepods, "cpu.shares") == str(1250 * 1024 // 1000)
        assert read("pids", kubepods, "pids.max") == str(32768 - 1000)
        # kube-reserved: all its limits; system-reserved-compressible: CPU only.
        assert int(read("memory", f"{private_root}/kube", "memory.limit_in_bytes")) == 512 * MiB
        assert read("cpu", f"{private_root}/kube", "cpu.shares") == "512"
        assert read("pids", f"{private_root}/kube", "pids.max") == "1000"
        assert read("cpu", f"{private_root}/system", "cpu.shares") == "256"
        assert int(read("memory", f"{private_root}/system", "memory.limit_in_bytes")) > 2**60
        # systemCgroups: the process that was in the "root" moved into it.
        assert container_of(other.pid, 1) == f"/{private_root}/system"
        assert read("devices", private_root, "cgroup.procs") == ""
        reasons = [e[1] for e in events]
        assert reasons.count("NodeAllocatableEnforced") >= 3
    finally:
        other.kill()
        other.wait()


def fake_proc(tmp: Path, pid: int) -> str:
    """A /proc where init's PID namespace is readable (this VM's init denies
    it): the namespace links agree, the cgroup file is the process's real one."""
    root = tmp / "proc"
    for p in (1, pid):
        (root / str(p) / "ns").mkdir(parents=True)
        (root / str(p) / "ns" / "pid").symlink_to("pid:[4026531836]")
    (root / str(pid) / "cgroup").symlink_to(f"/proc/{pid}/cgroup")
    return str(root)


def test_kubelet_cgroups_moves_the_process_and_sets_its_oom_score(
    private_root: str, tmp_path: Path
) -> None:
    mgr = CgroupManager("")
    proc = subprocess.Popen(["sleep", "300"])
    name = f"/{private_root}/kubelet"
    try:
        procfs = fake_proc(tmp_path, proc.pid)
        problems = ensure_process_in_container(proc.pid, 500, mgr, name, OOMAdjuster(), procfs)
        # Processes here start with cpu and memory in different cgroups, which
        # upstream reports, and moves the process all the same.
        assert all("hierarchy not unified" in p for p in problems)
        assert container_of(proc.pid, 1) == name
        assert Path(f"/proc/{proc.pid}/oom_score_adj").read_text().strip() == "500"
        # Already there: nothing moves again, the score is still set.
        assert ensure_process_in_container(proc.pid, 400, mgr, name, OOMAdjuster(), procfs) == []
        assert Path(f"/proc/{proc.pid}/oom_score_adj").read_text().strip() == "400"
        # This host's init hides its PID namespace: as upstream, nothing is done
        # and the failure is reported.
        if not os.access("/proc/1/ns/pid", os.R_OK):
            assert ensure_process_in_container(proc.pid, 300, mgr, name, OOMAdjuster()) == [
                f"failed to find pid namespace of process {proc.pid}"
            ]
    finally:
        proc.kill()
        proc.wait()
