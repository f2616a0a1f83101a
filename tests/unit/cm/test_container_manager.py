"""The node-level container manager on fixture trees: podPidsLimit, node
allocatable and its enforcement, failSwapOn, protectKernelDefaults, the
systemd driver's refusal (NewContainerManager / setupNode upstream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm import node_container_manager as nac
from kubelet.cm.cgroup_manager import CgroupManager, PodContainerManager
from kubelet.cm.container_manager import (
    ContainerManager,
    ContainerManagerError,
    HostPaths,
    NodeConfig,
)
from kubelet.util.sysctl import DESIRED_KERNEL_TUNABLES
from tests.unit.cm.test_cgroup_manager import mountinfo, pod

GiB, MiB = 1 << 30, 1 << 20
CAPACITY = {"cpu": 2000, "memory": 8 * GiB, "ephemeral-storage": 100 * GiB}
NO_SWAP = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


def proc_sys(tmp: Path, values: dict[str, int] | None = None, pid_max: int = 4194304) -> str:
    root = tmp / "proc-sys"
    for name, want in DESIRED_KERNEL_TUNABLES:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{(values or {}).get(name, want)}\n")
    (root / "kernel" / "pid_max").write_text(f"{pid_max}\n")
    (root / "kernel" / "threads-max").write_text("9999999\n")
    return str(root)


def host(tmp: Path, *, swaps: str = NO_SWAP, sysctls: dict[str, int] | None = None) -> HostPaths:
    cg = tmp / "cg"
    cg.mkdir(exist_ok=True)
    (tmp / "swaps").write_text(swaps)
    return HostPaths(
        mountinfo=mountinfo(cg, v1=True),
        proc_swaps=str(tmp / "swaps"),
        proc_sys=proc_sys(tmp, sysctls),
        systemd_runtime_dir=str(tmp / "no-systemd"),
    )


def node_config(**cfg_fields: object) -> NodeConfig:
    cfg = KubeletConfiguration()
    for k, v in cfg_fields.items():
        setattr(cfg, k, v)
    return NodeConfig.from_config(cfg, "node-a")


class Events(list[tuple[str, str, str]]):
    def __call__(self, etype: str, reason: str, message: str) -> None:
        self.append((etype, reason, message))


# ------------------------------------------------------------- podPidsLimit
@pytest.mark.parametrize("v1", [True, False])
def test_pod_pids_limit_is_pids_max_of_the_pod_cgroup(tmp_path: Path, v1: bool) -> None:
    pcm = PodContainerManager(CgroupManager("", mountinfo(tmp_path, v1=v1)), pod_pids_limit=100)
    pcm.ensure(pod("u1", cpu="100m"))
    base = tmp_path / ("pids" if v1 else "") / "kubepods/burstable/podu1"
    assert (base / "pids.max").read_text() == "100"


def test_no_pod_pids_limit_leaves_pids_max_alone(tmp_path: Path) -> None:
    # -1 (the default) and 0: the pod inherits its parents' limit, as upstream.
    for limit in (-1, 0):
        d = tmp_path / str(limit)
        d.mkdir()
        pcm = PodContainerManager(CgroupManager("", mountinfo(d, v1=True)), pod_pids_limit=limit)
        pcm.ensure(pod("u1"))
        assert not (d / "pids/kubepods/besteffort/podu1/pids.max").exists()


# --------------------------------------------------------- node allocatable
def test_kubepods_gets_capacity_minus_reservations_when_pods_are_enforced() -> None:
    cfg = nac.NodeAllocatableConfig(
        enforce=frozenset({"pods"}),
        system_reserved={"cpu": 500, "memory": GiB, "pid": 1000},
        kube_reserved={"memory": 512 * MiB},
        hard_eviction={"memory.available": "100Mi"},
    )
    internal = {**CAPACITY, "pid": 4194304}
    # Eviction thresholds are not taken off the cgroup limit, only off allocatable.
    assert nac.kubepods_config(cfg, internal, True) == {
        "cpu_shares": 1536,
        "memory_limit": 8 * GiB - GiB - 512 * MiB,
        "pids_limit": 4194304 - 1000,
    }
    # Without "pods": the whole capacity, so the default shares cannot starve pods.
    off = nac.NodeAllocatableConfig(enforce=frozenset(), system_reserved={"memory": GiB})
    assert nac.kubepods_config(off, internal, True) == {
        "cpu_shares": 2048, "memory_limit": 8 * GiB, "pids_limit": 4194304,
    }  # fmt: skip


def test_reservation_over_capacity_is_refused_with_every_resource() -> None:
    cfg = nac.NodeAllocatableConfig(
        system_reserved={"cpu": 1500, "memory": 6 * GiB},
        kube_reserved={"cpu": 1000, "memory": 2 * GiB},
        hard_eviction={"memory.available": "10%", "nodefs.available": "10%"},
    )
    err = nac.validate_node_allocatable(cfg, CAPACITY)
    assert err is not None
    assert err.startswith("invalid Node Allocatable configuration. ")
    assert "Resource 'cpu' has a reservation of 2500m but capacity of 2000m" in err
    # 8 GiB of reservations plus 10 % of memory for the eviction threshold, as
    # Go computes it: float32(10)/100 times the capacity (858993472, not 0.8 GiB).
    assert f"Resource 'memory' has a reservation of {8 * GiB + 858993472}" in err
    assert "ephemeral-storage" not in err  # 10 % of the disk fits
    ok = nac.NodeAllocatableConfig(system_reserved={"cpu": 500})
    assert nac.validate_node_allocatable(ok, CAPACITY) is None


def test_start_creates_kubepods_with_the_allocatable_limits(tmp_path: Path) -> None:
    h = host(tmp_path)
    ev = Events()
    nc = node_config(system_reserved={"memory": "1Gi", "cpu": "500m"}, kube_reserved={"pid": "100"})
    cm = ContainerManager(nc, CAPACITY, host=h, node_event=ev)
    cm.start()
    cg = tmp_path / "cg"
    assert (cg / "memory/kubepods/memory.limit_in_bytes").read_text() == str(7 * GiB)
    assert (cg / "cpu/kubepods/cpu.shares").read_text() == "1536"
    assert (cg / "pids/kubepods/pids.max").read_text() == str(4194304 - 100)
    assert ("Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods") in ev
    # A second start (a kubelet restart) updates the existing cgroup.
    (cg / "memory/kubepods/memory.limit_in_bytes").write_text("1")
    ContainerManager(nc, CAPACITY, host=h, node_event=ev).start()
    assert (cg / "memory/kubepods/memory.limit_in_bytes").read_text() == str(7 * GiB)


def test_missing_cgroup_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ContainerManagerError, match=r"invalid configuration: cgroup '/nowhere'"):
        ContainerManager(node_config(cgroup_root="/nowhere"), CAPACITY, host=host(tmp_path))


def test_reserved_cgroups_get_their_limits_and_must_exist(tmp_path: Path) -> None:
    h = host(tmp_path)
    nc = node_config(
        enforce_node_allocatable=["pods", "system-reserved", "kube-reserved-compressible"],
        system_reserved={"memory": "1Gi", "cpu": "250m", "pid": "500"},
        kube_reserved={"memory": "512Mi", "cpu": "1"},
        system_reserved_cgroup="/system.slice",
        kube_reserved_cgroup="/kube",
    )
    ev = Events()
    with pytest.raises(ContainerManagerError) as err:
        ContainerManager(nc, CAPACITY, host=h, node_event=ev).start()
    assert "Failed to enforce System Reserved Cgroup Limits on '/system.slice'" in str(err.value)
    assert "missing paths" in str(err.value)
    assert ev[-1][:2] == ("Warning", "FailedNodeAllocatableEnforcement")
    cg = tmp_path / "cg"
    for ctrl in ("cpu", "cpuacct", "cpuset", "memory", "pids"):
        (cg / ctrl / "system.slice").mkdir()
        (cg / ctrl / "kube").mkdir()
    ContainerManager(nc, CAPACITY, host=h, node_event=ev).start()
    assert (cg / "memory/system.slice/memory.limit_in_bytes").read_text() == str(GiB)
    assert (cg / "cpu/system.slice/cpu.shares").read_text() == "256"
    assert (cg / "pids/system.slice/pids.max").read_text() == "500"
    # compressible: only the CPU shares.
    assert (cg / "cpu/kube/cpu.shares").read_text() == "1024"
    assert not (cg / "memory/kube/memory.limit_in_bytes").exists()
    assert ("Normal", "NodeAllocatableEnforced",
            "Updated limits on system reserved cgroup /system.slice") in ev  # fmt: skip


# ------------------------------------------------------------- failSwapOn
SWAP_ON = NO_SWAP + "/dev/vdb                                partition\t1048572\t\t0\t\t-2\n"


def test_swap_on_with_fail_swap_on_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ContainerManagerError, match="running with swap on is not supported"):
        ContainerManager(node_config(), CAPACITY, host=host(tmp_path, swaps=SWAP_ON))


def test_swap_on_without_fail_swap_on_warns_about_memory_volumes(tmp_path: Path) -> None:
    ev = Events()
    ContainerManager(
        node_config(fail_swap_on=False), CAPACITY, host=host(tmp_path, swaps=SWAP_ON), node_event=ev
    )
    assert [e[1] for e in ev] == ["PossibleMemoryBackedVolumesOnDisk"]
    # No swap at all (or no /proc/swaps): nothing to say.
    ev.clear()
    (tmp_path / "again").mkdir()
    ContainerManager(node_config(), CAPACITY, host=host(tmp_path / "again"), node_event=ev)
    assert ev == []


# -------------------------------------------------- protectKernelDefaults
WRONG = {"vm/overcommit_memory": 0, "kernel/panic": 1, "kernel/panic_on_oops": 0}


def test_protect_kernel_defaults_refuses_every_differing_sysctl(tmp_path: Path) -> None:
    cm = ContainerManager(
        node_config(protect_kernel_defaults=True), CAPACITY, host=host(tmp_path, sysctls=WRONG)
    )
    with pytest.raises(ContainerManagerError) as err:
        cm.start()
    msg = str(err.value)
    assert "invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0" in msg
    assert "invalid kernel flag: kernel/panic, expected value: 10, actual value: 1" in msg
    assert "invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0" in msg
    assert "panic_on_oom" not in msg  # that one is as wanted
    assert (tmp_path / "proc-sys/vm/overcommit_memory").read_text() == "0\n"  # untouched


def test_without_protection_the_kubelet_sets_the_sysctls(tmp_path: Path) -> None:
    h = host(tmp_path, sysctls=WRONG)
    ContainerManager(node_config(), CAPACITY, host=h).start()
    for name, want in DESIRED_KERNEL_TUNABLES:
        assert int((Path(h.proc_sys) / name).read_text()) == want


def test_a_sysctl_that_cannot_be_set_is_fatal(tmp_path: Path) -> None:
    h = host(tmp_path, sysctls=WRONG)
    target = Path(h.proc_sys) / "kernel/panic"
    target.unlink()
    target.mkdir()  # neither readable as a number nor writable
    with pytest.raises(ContainerManagerError, match="kernel/panic"):
        ContainerManager(node_config(), CAPACITY, host=h).start()


# ------------------------------------------------------------ cgroupDriver
def test_systemd_driver_without_systemd_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ContainerManagerError) as err:
        ContainerManager(node_config(cgroup_driver="systemd"), CAPACITY, host=host(tmp_path))
    assert 'cgroupDriver is "systemd" but systemd is not running as init' in str(err.value)
    assert "cgroupfs" in str(err.value)


def test_enforce_none_and_per_qos_off_touch_no_cgroup(tmp_path: Path) -> None:
    h = host(tmp_path)
    ContainerManager(
        node_config(cgroups_per_qos=False, enforce_node_allocatable=["none"]), CAPACITY, host=h
    ).start()
    assert not (tmp_path / "cg/memory/kubepods").exists()


def test_pod_cgroup_removal_covers_the_hierarchies_only_runc_uses(tmp_path: Path) -> None:
    """runc also makes the pod's directory under name=systemd (and, on a hybrid
    host, the unified mount); removing the pod removes those too."""
    info = mountinfo(tmp_path, v1=True)
    (tmp_path / "unified").mkdir()
    with open(info, "a") as fh:
        fh.write(f"41 25 0:41 / {tmp_path}/unified rw - cgroup2 cgroup2 rw\n")
    pcm = PodContainerManager(CgroupManager("", info))
    pcm.ensure(pod("u9"))
    for hierarchy in ("systemd", "unified"):
        (tmp_path / hierarchy / "kubepods/besteffort/podu9/ctr").mkdir(parents=True)
    # (On a fixture tree the controllers' own directories hold files, so only
    # the runtime-only ones, which hold none, can go.)
    pcm.destroy(pod("u9"))
    for hierarchy in ("systemd", "unified"):
        assert not (tmp_path / hierarchy / "kubepods/besteffort/podu9").exists(), hierarchy
