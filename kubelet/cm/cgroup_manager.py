"""Pod cgroups with the cgroupfs driver: kubepods/<qos>/pod<uid> (pkg/kubelet/cm).

The kubelet creates a pod's cgroup before its sandbox, with the pod's CPU
shares and memory limit, and removes it (with whatever the runtime left
inside) once the pod is gone. On cgroup v1 every controller is its own
hierarchy, so each directory exists once per controller mount.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from kubelet.types import Pod, qos_class, uid
from kubelet.util.quantity import cpu_millis, to_bytes

log = logging.getLogger(__name__)

MIN_SHARES = 2
MIN_QUOTA_PERIOD = 1000  # µs: the kernel refuses a smaller CFS quota
DEFAULT_CPU_PERIOD = 100000  # µs


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> tuple[int, dict[str, str]]:
    """(version, {controller: mountpoint}); v2 maps "" to the unified mount."""
    v1: dict[str, str] = {}
    unified = ""
    with open(mountinfo) as fh:
        for line in fh:
            pre, _, post = line.partition(" - ")
            fields, post_fields = pre.split(), post.split()
            if len(fields) < 5 or len(post_fields) < 3:
                continue
            fstype, opts = post_fields[0], post_fields[2]
            if fstype == "cgroup":
                for o in opts.split(","):
                    if o in ("rw", "ro") or o.startswith(("name=", "release_agent")):
                        continue
                    v1.setdefault(o, fields[4])
            elif fstype == "cgroup2":
                unified = fields[4]
    if v1:
        return 1, v1
    return 2, {"": unified} if unified else {}


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as err:
        log.debug("cgroup write %s=%s failed: %s", path, value, err)


def milli_cpu_to_quota(milli: int, period: int) -> int:
    if milli == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli * period // 1000)


def pod_resources(
    pod: Pod, enforce_cpu_limits: bool = True, cpu_period: int = DEFAULT_CPU_PERIOD
) -> dict[str, int]:
    """The pod cgroup's settings (ResourceConfigForPod): CPU shares from the
    requests; when every container sets one, the CPU quota and the memory
    limit from the limits. spec.overhead (what the RuntimeClass says the
    sandbox itself costs) is added to the requests and to limits that are set.
    A BestEffort pod gets the minimum shares and nothing else."""
    if qos_class(pod) == "BestEffort":
        return {"cpu_shares": MIN_SHARES}
    spec = pod["spec"]
    cpu_req = cpu_lim = mem_lim = 0
    cpu_limited = mem_limited = True
    for c in spec.get("containers", []):
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        cpu = req.get("cpu", lim.get("cpu"))
        if cpu:
            cpu_req += cpu_millis(cpu)
        lim_cpu = cpu_millis(lim["cpu"]) if "cpu" in lim else 0
        lim_mem = to_bytes(lim["memory"]) if "memory" in lim else 0
        cpu_lim += lim_cpu
        mem_lim += lim_mem
        cpu_limited = cpu_limited and lim_cpu > 0
        mem_limited = mem_limited and lim_mem > 0
    overhead = spec.get("overhead") or {}
    if "cpu" in overhead:
        cpu_req += cpu_millis(overhead["cpu"])
        if cpu_lim:
            cpu_lim += cpu_millis(overhead["cpu"])
    if "memory" in overhead and mem_lim:
        mem_lim += to_bytes(overhead["memory"])
    out = {"cpu_shares": max(MIN_SHARES, cpu_req * 1024 // 1000)}
    if cpu_limited and cpu_lim:
        quota = milli_cpu_to_quota(cpu_lim, cpu_period) if enforce_cpu_limits else -1
        out["cpu_quota"], out["cpu_period"] = quota, cpu_period
    if mem_limited and mem_lim:
        out["memory_limit"] = mem_lim
    return out


class CgroupManager:
    def __init__(self, cgroup_root: str = "", mountinfo: str = "/proc/self/mountinfo") -> None:
        self.version, self.mounts = cgroup_mounts(mountinfo)
        self.root = cgroup_root.strip("/")

    def _paths(self, name: str) -> list[tuple[str, str]]:
        rel = "/".join(p for p in (self.root, name.strip("/")) if p)
        return [(ctrl, os.path.join(mount, rel)) for ctrl, mount in self.mounts.items()]

    def exists(self, name: str) -> bool:
        paths = self._paths(name)
        return bool(paths) and all(os.path.isdir(p) for _, p in paths)

    def create(self, name: str, resources: dict[str, int] | None = None) -> None:
        for ctrl, path in self._paths(name):
            if not os.path.isdir(path):
                os.makedirs(path, exist_ok=True)
                if ctrl == "cpuset":
                    self._inherit_cpuset(path)
                if self.version == 2:
                    _write(
                        os.path.join(os.path.dirname(path), "cgroup.subtree_control"),
                        "+cpu +memory +pids",
                    )
            self._apply(ctrl, path, resources or {})

    def _inherit_cpuset(self, path: str) -> None:
        # A new cpuset cgroup is unusable until it has CPUs and memory nodes:
        # copy them down from the parent at every level that lacks them.
        mount = self.mounts["cpuset"]
        cur = mount
        for part in os.path.relpath(path, mount).split("/"):
            parent, cur = cur, os.path.join(cur, part)
            for f in ("cpuset.cpus", "cpuset.mems"):
                try:
                    with open(os.path.join(cur, f)) as fh:
                        if fh.read().strip():
                            continue
                except FileNotFoundError:
                    pass
                try:
                    with open(os.path.join(parent, f)) as fh:
                        value = fh.read().strip()
                except OSError:
                    continue
                _write(os.path.join(cur, f), value)

    def _apply(self, ctrl: str, path: str, r: dict[str, int]) -> None:
        if "cpu_shares" in r:
            if ctrl == "cpu":
                _write(os.path.join(path, "cpu.shares"), str(r["cpu_shares"]))
            elif ctrl == "" and self.version == 2:
                # cgroup v2 weight from shares, as runc converts them.
                weight = 1 + ((r["cpu_shares"] - 2) * 9999) // 262142
                _write(os.path.join(path, "cpu.weight"), str(weight))
        if "cpu_quota" in r:
            quota, period = r["cpu_quota"], r["cpu_period"]
            if ctrl == "cpu":
                _write(os.path.join(path, "cpu.cfs_period_us"), str(period))
                _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
            elif ctrl == "" and self.version == 2:
                _write(os.path.join(path, "cpu.max"), f"{quota if quota > 0 else 'max'} {period}")
        if "memory_limit" in r:
            if ctrl == "memory":
                _write(os.path.join(path, "memory.limit_in_bytes"), str(r["memory_limit"]))
            elif ctrl == "" and self.version == 2:
                _write(os.path.join(path, "memory.max"), str(r["memory_limit"]))

    def destroy(self, name: str) -> bool:
        """Remove the cgroup and any children the runtime left; False if some are busy."""
        ok = True
        for _, path in self._paths(name):
            for dirpath, _dirs, _files in sorted(
                os.walk(path), key=lambda t: len(t[0]), reverse=True
            ):
                try:
                    os.rmdir(dirpath)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    if err.errno == errno.EBUSY:
                        ok = False  # processes are still inside: try again later
                    else:
                        log.warning("removing cgroup %s: %s", dirpath, err)
                        ok = False
        return ok


class PodContainerManager:
    """The kubepods tree: QoS level cgroups and one cgroup per pod."""

    def __init__(
        self,
        mgr: CgroupManager,
        enforce_cpu_limits: bool = True,
        cpu_period: int = DEFAULT_CPU_PERIOD,
        exclusive_cpus: Callable[[Pod], bool] = lambda _pod: False,
    ) -> None:
        self.mgr = mgr
        # --cpu-cfs-quota and --cpu-cfs-quota-period
        self.enforce_cpu_limits = enforce_cpu_limits
        self.cpu_period = cpu_period
        # Pods with CPUs of their own get no CFS quota (DisableCPUQuotaWithExclusiveCPUs).
        self.exclusive_cpus = exclusive_cpus

    def setup_qos(self) -> None:
        self.mgr.create("kubepods")
        self.mgr.create("kubepods/burstable")
        self.mgr.create("kubepods/besteffort", {"cpu_shares": MIN_SHARES})

    @staticmethod
    def name(pod: Pod) -> str:
        qos = qos_class(pod)
        if qos == "Guaranteed":
            return f"kubepods/pod{uid(pod)}"
        return f"kubepods/{qos.lower()}/pod{uid(pod)}"

    def ensure(self, pod: Pod) -> None:
        enforce = self.enforce_cpu_limits and not self.exclusive_cpus(pod)
        self.mgr.create(self.name(pod), pod_resources(pod, enforce, self.cpu_period))

    def destroy(self, pod: Pod) -> bool:
        return self.mgr.destroy(self.name(pod))

    def orphans(self, keep: set[str]) -> list[str]:
        """Pod cgroups whose pod UID is not in `keep`."""
        out = []
        for base in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            paths = self.mgr._paths(base)
            if not paths:
                continue
            try:
                entries = os.listdir(paths[0][1])
            except OSError:
                continue
            out += [f"{base}/{e}" for e in entries if e.startswith("pod") and e[3:] not in keep]
        return out

    def destroy_name(self, name: str) -> bool:
        return self.mgr.destroy(name)
