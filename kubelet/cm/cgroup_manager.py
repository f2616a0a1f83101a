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
from collections.abc import Callable, Sequence

from kubelet.cm import hugepages
from kubelet.cm.hugepages import KEY_PREFIX as HUGETLB_KEY
from kubelet.cm.metrics import CGROUP_CREATE, CGROUP_DESTROY, CGROUP_UPDATE
from kubelet.resourcehelper import pod_level_limits, pod_limits, pod_requests
from kubelet.types import Pod, qos_class, uid

log = logging.getLogger(__name__)

MIN_SHARES, MAX_SHARES = 2, 262144
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


def runtime_only_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """On a v1 host, the hierarchies runc also puts containers in that carry no
    controller the kubelet sets: named ones (name=systemd) and, on a hybrid
    host, the unified mount. A pod's cgroup is removed from these too."""
    out: list[str] = []
    v1 = False
    with open(mountinfo) as fh:
        for line in fh:
            pre, _, post = line.partition(" - ")
            fields, post_fields = pre.split(), post.split()
            if len(fields) < 5 or len(post_fields) < 3:
                continue
            if post_fields[0] == "cgroup":
                v1 = True
                opts = post_fields[2].split(",")
                if any(o.startswith("name=") for o in opts) and not any(
                    o in VALIDATED_V1_CONTROLLERS for o in opts
                ):
                    out.append(fields[4])
            elif post_fields[0] == "cgroup2":
                out.append(fields[4])
    return out if v1 else []


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as err:
        log.debug("cgroup write %s=%s failed: %s", path, value, err)


def _has_controller(path: str, name: str) -> bool:
    """cgroup v2: the controller is available in this cgroup."""
    try:
        with open(os.path.join(path, "cgroup.controllers")) as fh:
            return name in fh.read().split()
    except OSError:
        return False


class CgroupError(Exception):
    """A cgroup that is missing or whose settings the kernel refused."""


# The v1 hierarchies a kubelet cgroup must exist in (Validate upstream); the
# others (net_cls, devices, ...) may lack it.
VALIDATED_V1_CONTROLLERS = frozenset({"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb"})


def cgroup_files(version: int, ctrl: str, r: dict[str, int]) -> list[tuple[str, str]]:
    """The (file, value) pairs that set `r` under one controller's directory:
    on v1 each controller has its own files, on v2 ("" controller) one
    directory holds them all."""
    v2 = version == 2 and ctrl == ""
    out: list[tuple[str, str]] = []
    if "cpu_shares" in r:
        if ctrl == "cpu":
            out.append(("cpu.shares", str(r["cpu_shares"])))
        elif v2:
            # cgroup v2 weight from shares, as runc converts them.
            out.append(("cpu.weight", str(1 + ((r["cpu_shares"] - 2) * 9999) // 262142)))
    if "cpu_quota" in r:
        quota, period = r["cpu_quota"], r["cpu_period"]
        if ctrl == "cpu":
            out += [("cpu.cfs_period_us", str(period)), ("cpu.cfs_quota_us", str(quota))]
        elif v2:
            out.append(("cpu.max", f"{quota if quota > 0 else 'max'} {period}"))
    if "memory_limit" in r:
        if ctrl == "memory":
            out.append(("memory.limit_in_bytes", str(r["memory_limit"])))
        elif v2:
            out.append(("memory.max", str(r["memory_limit"])))
    if "pids_limit" in r and (ctrl == "pids" or v2):
        # pids.max on both versions; zero or less is no limit.
        limit = r["pids_limit"]
        out.append(("pids.max", str(limit) if limit > 0 else "max"))
    if ctrl == "hugetlb" or v2:
        suffix = "max" if v2 else "limit_in_bytes"
        out += [
            (f"{k}.{suffix}", str(v)) for k, v in sorted(r.items()) if k.startswith(HUGETLB_KEY)
        ]
    return out


def _int_or_unlimited(text: str, key: str, out: dict[str, int]) -> None:
    # v1 writes a page-rounded huge number for no memory limit, v2 "max".
    v = -1 if text == "max" else int(text)
    out[key] = -1 if v >= 1 << 62 else v


def _cpu_max(text: str, _key: str, out: dict[str, int]) -> None:
    quota, _, period = text.partition(" ")
    out["cpu_quota"] = -1 if quota == "max" else int(quota)
    out["cpu_period"] = int(period or DEFAULT_CPU_PERIOD)


def _weight_to_shares(text: str, key: str, out: dict[str, int]) -> None:
    out[key] = 2 + ((int(text) - 1) * 262142) // 9999


_Parse = Callable[[str, str, dict[str, int]], None]
_READS: dict[tuple[int, str], dict[str, tuple[str, _Parse]]] = {
    (1, "cpu"): {
        "cpu_shares": ("cpu.shares", _int_or_unlimited),
        "cpu_quota": ("cpu.cfs_quota_us", _int_or_unlimited),
        "cpu_period": ("cpu.cfs_period_us", _int_or_unlimited),
    },
    (1, "memory"): {
        "memory_limit": ("memory.limit_in_bytes", _int_or_unlimited),
        "memory_usage": ("memory.usage_in_bytes", _int_or_unlimited),
    },
    (2, ""): {
        "cpu_shares": ("cpu.weight", _weight_to_shares),
        "cpu_quota": ("cpu.max", _cpu_max),
        "memory_limit": ("memory.max", _int_or_unlimited),
        "memory_usage": ("memory.current", _int_or_unlimited),
    },
}


def milli_cpu_to_shares(milli: int) -> int:
    """MilliCPUToShares: cpu.shares for a cpu request, within the kernel's bounds."""
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def milli_cpu_to_quota(milli: int, period: int) -> int:
    if milli == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli * period // 1000)


def pod_resources(
    pod: Pod, enforce_cpu_limits: bool = True, cpu_period: int = DEFAULT_CPU_PERIOD
) -> dict[str, int]:
    """The pod cgroup's settings (ResourceConfigForPod) from the pod's effective
    requests and limits (kubelet/resourcehelper: the containers' aggregate or
    the pod-level resources, with spec.overhead): CPU shares from the cpu
    request; a Guaranteed pod gets its cpu quota and memory limit, a Burstable
    one each of them only when every container (init containers with their
    sidecars included) declares that limit or the pod declares it at pod
    level. A BestEffort pod gets the minimum shares only."""
    qos = qos_class(pod)
    if qos == "BestEffort":
        return {"cpu_shares": MIN_SHARES}
    declared = {"cpu": True, "memory": True}

    def each(limits: dict[str, int]) -> None:
        for k in declared:
            declared[k] = declared[k] and limits.get(k, 0) > 0

    limits = pod_limits(pod, each=each)
    for k, v in pod_level_limits(pod).items():
        if k in declared and v > 0:
            declared[k] = True
    cpu_req, cpu_lim = pod_requests(pod).get("cpu", 0), limits.get("cpu", 0)
    out = {"cpu_shares": milli_cpu_to_shares(cpu_req)}
    if cpu_lim and (qos == "Guaranteed" or declared["cpu"]):
        quota = milli_cpu_to_quota(cpu_lim, cpu_period) if enforce_cpu_limits else -1
        out["cpu_quota"], out["cpu_period"] = quota, cpu_period
    if limits.get("memory") and (qos == "Guaranteed" or declared["memory"]):
        out["memory_limit"] = limits["memory"]
    return out


class CgroupManager:
    def __init__(self, cgroup_root: str = "", mountinfo: str = "/proc/self/mountinfo") -> None:
        self.version, self.mounts = cgroup_mounts(mountinfo)
        self.root = cgroup_root.strip("/")
        self.runtime_only = runtime_only_mounts(mountinfo)

    def _paths(self, name: str) -> list[tuple[str, str]]:
        rel = "/".join(p for p in (self.root, name.strip("/")) if p)
        return [(ctrl, os.path.join(mount, rel)) for ctrl, mount in self.mounts.items()]

    def has_hugetlb(self) -> bool:
        """A hugetlb hierarchy (v1) or controller (v2) to write limits to."""
        if self.version == 1:
            return "hugetlb" in self.mounts
        return "" in self.mounts and _has_controller(self.mounts[""], "hugetlb")

    def exists(self, name: str) -> bool:
        paths = self._paths(name)
        return bool(paths) and all(os.path.isdir(p) for _, p in paths)

    def create(self, name: str, resources: dict[str, int] | None = None) -> None:
        """Make the cgroup where missing and set `resources`; raises CgroupError
        naming every setting the kernel refused."""
        with CGROUP_CREATE.time():
            self._create(name, resources)

    def _create(self, name: str, resources: dict[str, int] | None) -> None:
        errs: list[str] = []
        for ctrl, path in self._paths(name):
            if not os.path.isdir(path):
                os.makedirs(path, exist_ok=True)
                if ctrl == "cpuset":
                    self._inherit_cpuset(path)
                if self.version == 2:
                    parent = os.path.dirname(path)
                    control = os.path.join(parent, "cgroup.subtree_control")
                    _write(control, "+cpu +memory +pids")
                    if _has_controller(parent, "hugetlb"):
                        _write(control, "+hugetlb")
            errs += self._apply(ctrl, path, resources or {})
        if errs:
            raise CgroupError(f"failed to create cgroup {name!r}: " + "; ".join(errs))

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

    def _apply(self, ctrl: str, path: str, r: dict[str, int]) -> list[str]:
        """Write the settings this controller holds; the failures, as messages."""
        errs = []
        for fname, value in cgroup_files(self.version, ctrl, r):
            target = os.path.join(path, fname)
            if fname.startswith(HUGETLB_KEY) and not os.path.exists(target):
                # No hugetlb controller here (not delegated, or that page size
                # is gone): said once at start-up (hugetlb_unavailable).
                continue
            try:
                with open(target, "w") as fh:
                    fh.write(value)
            except OSError as err:
                errs.append(f"failed to write {value!r} to {target}: {err.strerror or err}")
        return errs

    def update(self, name: str, resources: dict[str, int]) -> None:
        """Set `resources` on an existing cgroup (Update); raises CgroupError."""
        with CGROUP_UPDATE.time():
            self._update(name, resources)

    def _update(self, name: str, resources: dict[str, int]) -> None:
        self.validate(name)
        errs: list[str] = []
        for ctrl, path in self._paths(name):
            errs += self._apply(ctrl, path, resources)
        if errs:
            raise CgroupError(f"failed to update cgroup {name!r}: " + "; ".join(errs))

    def read(self, name: str) -> dict[str, int]:
        """The cgroup's cpu and memory settings and its memory usage, in the
        keys `update` takes (GetCgroupConfig); an unlimited value reads as -1.
        Raises OSError."""
        out: dict[str, int] = {}
        for ctrl, path in self._paths(name):
            for key, (fname, parse) in _READS.get((self.version, ctrl), {}).items():
                with open(os.path.join(path, fname)) as fh:
                    parse(fh.read().strip(), key, out)
        return out

    def validate(self, name: str) -> None:
        """Raise CgroupError unless the cgroup exists under every controller the
        kubelet uses (Validate upstream; other v1 hierarchies do not count)."""
        missing = [
            path
            for ctrl, path in self._paths(name)
            if (self.version == 2 or ctrl in VALIDATED_V1_CONTROLLERS) and not os.path.isdir(path)
        ]
        if missing or not self.mounts:
            shown = ", ".join(missing) or "no cgroup mount"
            raise CgroupError(f"cgroup {self.literal(name)!r} has some missing paths: {shown}")

    def attach(self, name: str, pid: int) -> None:
        """Move a process into the cgroup in every hierarchy; raises OSError."""
        for _, path in self._paths(name):
            with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                fh.write(str(pid))

    def literal(self, name: str) -> str:
        """The cgroupfs name (/root/name) as operators write it."""
        return "/" + "/".join(p for p in (self.root, name.strip("/")) if p)

    def destroy(self, name: str) -> bool:
        """Remove the cgroup and any children the runtime left; False if some are busy."""
        with CGROUP_DESTROY.time():
            return self._destroy(name)

    def _destroy(self, name: str) -> bool:
        ok = True
        rel = "/".join(p for p in (self.root, name.strip("/")) if p)
        extra = [("", os.path.join(m, rel)) for m in self.runtime_only]
        for _, path in self._paths(name) + extra:
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
        pod_pids_limit: int = -1,
        exclusive_cpus: Callable[[Pod], bool] = lambda _pod: False,
        hugepage_sizes: Sequence[str] = (),
    ) -> None:
        self.mgr = mgr
        # The node's hugepage sizes: each gets a hugetlb limit on every pod cgroup.
        self.hugepage_sizes = tuple(hugepage_sizes)
        # --cpu-cfs-quota and --cpu-cfs-quota-period
        self.enforce_cpu_limits = enforce_cpu_limits
        self.cpu_period = cpu_period
        # podPidsLimit: pids.max of every pod cgroup when positive.
        self.pod_pids_limit = pod_pids_limit
        # Pods with CPUs of their own get no CFS quota (DisableCPUQuotaWithExclusiveCPUs).
        self.exclusive_cpus = exclusive_cpus

    def setup_qos(self) -> None:
        # The QoS cgroups never bind hugepages; the pod cgroups do.
        unbounded = {hugepages.KEY_PREFIX + s: hugepages.UNBOUNDED for s in self.hugepage_sizes}
        self.mgr.create("kubepods")
        self.mgr.create("kubepods/burstable", unbounded)
        self.mgr.create("kubepods/besteffort", {"cpu_shares": MIN_SHARES, **unbounded})

    def hugetlb_unavailable(self) -> bool:
        """The node has hugepage sizes but no hugetlb controller to limit them."""
        return bool(self.hugepage_sizes) and not self.mgr.has_hugetlb()

    @staticmethod
    def name(pod: Pod) -> str:
        qos = qos_class(pod)
        if qos == "Guaranteed":
            return f"kubepods/pod{uid(pod)}"
        return f"kubepods/{qos.lower()}/pod{uid(pod)}"

    def ensure(self, pod: Pod) -> None:
        enforce = self.enforce_cpu_limits and not self.exclusive_cpus(pod)
        resources = pod_resources(pod, enforce, self.cpu_period)
        if self.pod_pids_limit > 0:
            resources["pids_limit"] = self.pod_pids_limit
        resources.update(hugepages.pod_limits(pod, self.hugepage_sizes))
        self.mgr.create(self.name(pod), resources)

    def desired(self, pod: Pod) -> dict[str, int]:
        """The pod cgroup's cpu and memory settings for the pod's (allocated)
        resources (ResourceConfigForPod)."""
        enforce = self.enforce_cpu_limits and not self.exclusive_cpus(pod)
        return pod_resources(pod, enforce, self.cpu_period)

    def read(self, pod: Pod) -> dict[str, int]:
        """What the pod cgroup has now (GetPodCgroupConfig); raises OSError."""
        return self.mgr.read(self.name(pod))

    def update(self, pod: Pod, resources: dict[str, int]) -> None:
        """SetPodCgroupConfig; raises CgroupError."""
        self.mgr.update(self.name(pod), resources)

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
