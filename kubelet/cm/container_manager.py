"""The node-level container manager (pkg/kubelet/cm/container_manager_linux.go):
what the kubelet checks and sets up on the host before it runs pods.

At construction (NewContainerManager): swap (failSwapOn), the cgroup driver
(systemd needs systemd as init), the cgroup root (must exist when
cgroupsPerQOS). At start: the reservations fit in the capacity, the kernel
tunables (protectKernelDefaults: check; otherwise set), the kubepods cgroup
with node allocatable limits, the reserved cgroups' limits
(enforceNodeAllocatable), and the system containers (systemCgroups,
kubeletCgroups). Each failure is a ContainerManagerError: the command exits 1
with it. Afterwards `run` keeps the kubepods limits, the system containers and
the kubelet's OOM score in place.

Its node allocatable reservation (`reservation`, GetNodeAllocatableReservation)
is what the CPU and memory managers (resource_managers.py) reserve; those are
bound to the kubelet's active pods when the Kubelet is built, as upstream's
Start binds them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubelet.cm import node_container_manager as nac
from kubelet.cm.cgroup_manager import CgroupError, CgroupManager
from kubelet.cm.interfaces import ContainerManagerError
from kubelet.cm.system_containers import (
    SystemContainerError,
    ensure_process_in_container,
    ensure_system_cgroups,
)
from kubelet.features import Feature, FeatureGate
from kubelet.util.oom import OOMAdjuster
from kubelet.util.swap import PROC_SWAPS, is_swap_on
from kubelet.util.sysctl import PROC_SYS, KernelTunableBehavior, Sysctl, setup_kernel_tunables

if TYPE_CHECKING:
    from kubelet.apis.config import KubeletConfiguration

log = logging.getLogger(__name__)

KUBEPODS = "kubepods"
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"  # sd_booted(): systemd is init
ENFORCE_RETRY = 60.0  # s between attempts to set the kubepods limits
SYSTEM_CONTAINERS_PERIOD = 60.0
KUBELET_OOM_PERIOD = 300.0

NodeEvent = Callable[[str, str, str], None]


@dataclass(frozen=True)
class HostPaths:
    """Where the container manager reads and writes the host; tests point them
    at fixtures and private cgroups."""

    mountinfo: str = "/proc/self/mountinfo"
    proc_swaps: str = PROC_SWAPS
    proc_sys: str = PROC_SYS
    proc: str = "/proc"
    systemd_runtime_dir: str = SYSTEMD_RUNTIME_DIR
    # The cgroup whose processes systemCgroups takes in (upstream: "/").
    system_root_cgroup: str = "/"


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    cgroups_per_qos: bool = True
    cgroup_root: str = "/"
    cgroup_driver: str = "cgroupfs"
    system_cgroups: str = ""
    kubelet_cgroups: str = ""
    kubelet_oom_score_adj: int = -999
    protect_kernel_defaults: bool = False
    fail_swap_on: bool = True
    pod_pids_limit: int = -1
    allocatable: nac.NodeAllocatableConfig = field(default_factory=nac.NodeAllocatableConfig)
    # KubeletInUserNamespace: a kernel tunable that cannot be set is not fatal.
    tolerate_userns: bool = False

    @classmethod
    def from_config(cls, cfg: KubeletConfiguration, node_name: str) -> NodeConfig:
        """Raises ValueError when kubeReserved/systemReserved do not parse."""
        return cls(
            node_name=node_name,
            cgroups_per_qos=cfg.cgroups_per_qos,
            # Upstream defaults an empty cgroupRoot to "/" when cgroupsPerQOS.
            cgroup_root=cfg.cgroup_root or "/",
            cgroup_driver=cfg.cgroup_driver,
            system_cgroups=cfg.system_cgroups,
            kubelet_cgroups=cfg.kubelet_cgroups,
            kubelet_oom_score_adj=cfg.oom_score_adj,
            protect_kernel_defaults=cfg.protect_kernel_defaults,
            fail_swap_on=cfg.fail_swap_on,
            pod_pids_limit=cfg.pod_pids_limit,
            allocatable=nac.NodeAllocatableConfig.from_config(cfg),
            tolerate_userns=FeatureGate(cfg.feature_gates).enabled(Feature.KubeletInUserNamespace),
        )


def pid_capacity(proc_sys: str = PROC_SYS) -> int | None:
    """The system-wide task limit: the lower of pid_max and threads-max."""
    values = []
    for name in ("kernel/pid_max", "kernel/threads-max"):
        try:
            values.append(Sysctl(proc_sys).get(name))
        except (OSError, ValueError):
            continue
    return min(values) if values else None


class ContainerManager:
    def __init__(
        self,
        nc: NodeConfig,
        capacity: nac.ResourceList,
        *,
        host: HostPaths | None = None,
        node_event: NodeEvent | None = None,
        oom: OOMAdjuster | None = None,
    ) -> None:
        """`capacity` is the node's (cpu in millicores, memory, ephemeral-storage,
        hugepages-*); the pid capacity is added from the host."""
        self.nc = nc
        self.host = host or HostPaths()
        self.node_event: NodeEvent = node_event if node_event is not None else (lambda *_: None)
        self.oom = oom or OOMAdjuster(self.host.proc)
        self.capacity = dict(capacity)
        self.internal_capacity = dict(capacity)
        pids = pid_capacity(self.host.proc_sys)
        if pids is not None:
            self.internal_capacity["pid"] = pids
        self._check_swap()
        self._check_driver()
        # Pods' cgroups live under <cgroupRoot>/kubepods; reserved and system
        # cgroups are absolute paths from the hierarchy roots.
        self.pods_mgr = CgroupManager(nc.cgroup_root if nc.cgroups_per_qos else "",
                                      self.host.mountinfo)  # fmt: skip
        self.host_mgr = CgroupManager("", self.host.mountinfo)
        if nc.cgroups_per_qos:
            try:
                self.pods_mgr.validate("")
            except CgroupError as err:
                raise ContainerManagerError(f"invalid configuration: {err}") from err
            log.info("Container manager verified user specified cgroup-root exists: %s",
                     nc.cgroup_root)  # fmt: skip
        self.kubepods_enforced = False
        self._log_config_caveats()

    def _log_config_caveats(self) -> None:
        nc = self.nc
        reserved = nc.allocatable.system_reserved.keys() | nc.allocatable.kube_reserved.keys()
        v1_without_pids = self.host_mgr.version == 1 and "pids" not in self.host_mgr.mounts
        if (nc.pod_pids_limit > 0 or "pid" in reserved) and v1_without_pids:
            log.warning(
                "The pids cgroup controller is not mounted: podPidsLimit and pid reservations "
                "cannot be enforced on this host"
            )
        if any(r.startswith("hugepages-") for r in reserved):
            log.warning(
                "Reserved hugepages are taken off allocatable but not set as hugetlb limits"
            )
        kc, krc = nc.kubelet_cgroups, nc.allocatable.kube_reserved_cgroup
        if kc and krc and not kc.startswith(krc):
            log.info("unsupported configuration: kubeletCgroups is not within kubeReservedCgroup")

    def _check_swap(self) -> None:
        try:
            swap = is_swap_on(self.host.proc_swaps)
        except OSError as err:
            raise ContainerManagerError(f"failed to determine if swap is on: {err}") from err
        if not swap:
            return
        if self.nc.fail_swap_on:
            raise ContainerManagerError(
                "running with swap on is not supported, please disable swap or set "
                "--fail-swap-on flag to false"
            )
        # This kubelet mounts memory-backed volumes without tmpfs's noswap option.
        self.node_event(
            "Warning",
            "PossibleMemoryBackedVolumesOnDisk",
            "The tmpfs noswap option is not supported. Memory-backed volumes (e.g. secrets, "
            "emptyDirs, etc.) might be swapped to disk and should no longer be considered secure.",
        )

    def _check_driver(self) -> None:
        if self.nc.cgroup_driver != "systemd":
            return
        if not os.path.isdir(self.host.systemd_runtime_dir):
            raise ContainerManagerError(
                f'cgroupDriver is "systemd" but systemd is not running as init '
                f"({self.host.systemd_runtime_dir} does not exist): set cgroupDriver: cgroupfs "
                "(--cgroup-driver=cgroupfs) and configure the container runtime for cgroupfs"
            )
        raise ContainerManagerError(
            'cgroupDriver "systemd" is not implemented by this kubelet yet (transient slices '
            "through systemd's D-Bus API): use cgroupfs, with the runtime configured to match"
        )

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """validateNodeAllocatable, then setupNode; raises ContainerManagerError."""
        problem = nac.validate_node_allocatable(self.nc.allocatable, self.capacity)
        if problem:
            raise ContainerManagerError(problem)
        self._kernel_tunables()
        if self.nc.cgroups_per_qos:
            self._node_allocatable_cgroup()
        try:
            nac.enforce_reserved_cgroups(self.nc.allocatable, self.host_mgr, self.node_event)
        except nac.EnforcementError as err:
            raise ContainerManagerError(str(err)) from err
        if self.nc.system_cgroups == "/":
            raise ContainerManagerError('system container cannot be root ("/")')
        self.ensure_system_containers()

    def _kernel_tunables(self) -> None:
        behavior = (
            KernelTunableBehavior.ERROR
            if self.nc.protect_kernel_defaults
            else KernelTunableBehavior.MODIFY
        )
        problems = setup_kernel_tunables(
            Sysctl(self.host.proc_sys), behavior, tolerate_set_failure=self._tolerate_userns()
        )
        if problems:
            raise ContainerManagerError("; ".join(problems))

    def _tolerate_userns(self) -> bool:
        if not self.nc.tolerate_userns:
            return False
        try:
            with open(os.path.join(self.host.proc, "self/uid_map")) as fh:
                return fh.read().split() != ["0", "0", "4294967295"]
        except OSError:
            return False

    def reservation(self) -> nac.ResourceList:
        """GetNodeAllocatableReservation: reserved + hard eviction, per resource
        of the capacity (cpu in millicores)."""
        return nac.reservation(self.nc.allocatable, self.capacity)

    def kubepods_settings(self) -> dict[str, int]:
        return nac.kubepods_config(
            self.nc.allocatable, self.internal_capacity, self.nc.cgroups_per_qos
        )

    def _node_allocatable_cgroup(self) -> None:
        """createNodeAllocatableCgroups, then one attempt at the limits; `run`
        retries them (usage may be above a lowered limit until evictions)."""
        settings = self.kubepods_settings()
        if not self.pods_mgr.exists(KUBEPODS):
            try:
                self.pods_mgr.create(KUBEPODS, settings)
            except (OSError, CgroupError) as err:
                raise ContainerManagerError(f"failed to create {KUBEPODS} cgroup: {err}") from err
            self._kubepods_done()
            return
        self.update_kubepods()

    def update_kubepods(self) -> bool:
        try:
            self.pods_mgr.update(KUBEPODS, self.kubepods_settings())
        except (OSError, CgroupError) as err:
            self.node_event(
                "Warning",
                "FailedNodeAllocatableEnforcement",
                f"Failed to update Node Allocatable Limits "
                f"{self.pods_mgr.literal(KUBEPODS)!r}: {err}",
            )
            return False
        self._kubepods_done()
        return True

    def _kubepods_done(self) -> None:
        self.kubepods_enforced = True
        self.node_event(
            "Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods"
        )

    def ensure_system_containers(self) -> list[str]:
        """Processes into systemCgroups, the kubelet into kubeletCgroups (with its
        OOM score); the problems, which are logged, not fatal, as upstream."""
        problems: list[str] = []
        try:
            if self.nc.system_cgroups:
                ensure_system_cgroups(
                    self.host_mgr, self.host.system_root_cgroup, self.nc.system_cgroups,
                    self.host.proc,
                )  # fmt: skip
        except SystemContainerError as err:
            problems.append(str(err))
        problems += self.ensure_kubelet_container()
        for p in problems:
            log.info("Failed to ensure state of system containers: %s", p)
        return problems

    def ensure_kubelet_container(self) -> list[str]:
        return ensure_process_in_container(
            os.getpid(),
            self.nc.kubelet_oom_score_adj,
            self.host_mgr,
            self.nc.kubelet_cgroups or None,
            self.oom,
            self.host.proc,
        )

    # -------------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> None:
        """The periodic part: kubepods limits until they hold, the system
        containers every minute, the kubelet's OOM score every 5 minutes."""
        loop = asyncio.get_running_loop()
        last_oom = loop.time()
        last_enforce = loop.time()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), SYSTEM_CONTAINERS_PERIOD)
                return
            except TimeoutError:
                pass
            now = loop.time()
            if (self.nc.cgroups_per_qos and not self.kubepods_enforced
                    and now - last_enforce >= ENFORCE_RETRY):  # fmt: skip
                last_enforce = now
                await loop.run_in_executor(None, self.update_kubepods)
            if self.nc.system_cgroups or self.nc.kubelet_cgroups:
                await loop.run_in_executor(None, self.ensure_system_containers)
            elif now - last_oom >= KUBELET_OOM_PERIOD:
                last_oom = now
                await loop.run_in_executor(None, self.ensure_kubelet_container)
