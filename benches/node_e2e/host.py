"""The machine-wide parts of a node e2e run, and their cleanup.

The suite hard-codes what a node it owns would have: the kubelet's root
directory /var/lib/kubelet (pod-resources socket, CPU/memory manager state,
device-plugin sockets), /var/log/pods, pod cgroups under /kubepods (cgroupRoot
"/", and specs that look for them there), the kubelet's ports 10248/10250/10255
and the API server's 6443.

On a machine shared with other kubelets, each run gets the paths from a mount
namespace of its own (make_paths_private): there /var/lib/kubelet and the log
directories are bind mounts of directories in the run's work directory, and
each cgroup hierarchy's root is a bind mount of the host's /kpy-node-e2e
subtree of it. So the run's kubelet, containerd, runc and the suite all see
/kubepods where the host has /kpy-node-e2e/kubepods: another kubelet on the
host using /kubepods (and removing pod cgroups it does not know) never meets
the run's pods, nor they its. Every mount goes when the run ends. Ports cannot
be made private that way: a machine-wide lock, and a run refuses to start
where they are taken.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import time
from pathlib import Path

from benches.conformance.harness import RunFailed

LOCK = "/tmp/kpy-node-e2e.lock"
# Paths the suite and its kubelet use as they are, private to a run.
# /run/containerd: where a node's containerd has its socket, and where the
# upstream kubelet's cAdvisor looks for it (its --containerd flag's default).
# /var/run/cdi: where the suite's DRA test driver writes a CDI spec per
# prepared claim and the run's containerd reads them; on the host they leak.
PRIVATE_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
    "/var/run/cdi",
)
DEFAULT_CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# The pod network: the suite's podCIDR (test/e2e_node/jenkins), on a bridge of
# the run's own. One run at a time (the lock), so fixed names do.
POD_SUBNET = "10.100.0.0/24"
BRIDGE = "kpne2e0"
# API server (in the e2e binary), kubelet server, healthz, read-only port.
FIXED_PORTS = (6443, 10250, 10248, 10255)
CGROUP_FS = Path("/sys/fs/cgroup")
# The host cgroup that is the root of every hierarchy inside the run.
CGROUP_SUBTREE = "kpy-node-e2e"


def take_lock() -> int:
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunFailed(f"another node e2e run holds {LOCK}") from None
    return fd


def check_ports() -> None:
    busy = []
    for port in FIXED_PORTS:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    if busy:
        raise RunFailed(
            f"ports {busy} are in use: the node e2e suite needs 6443 (API server) and "
            "10248/10250/10255 (kubelet) on this machine"
        )


def hierarchies() -> list[Path]:
    """One directory per mounted hierarchy: the v1 controllers, or the v2 root."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()]


def remove_cgroup_tree(root: Path) -> list[str]:
    """rmdir the tree bottom-up; returns the directories that would not go
    (a process still in them)."""
    if not root.is_dir():
        return []
    left = []
    dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for d in [*dirs, root]:
        try:
            d.rmdir()
        except OSError:
            left.append(str(d))
    return left


def own_cgroups() -> dict[Path, str]:
    """Hierarchy directory -> this process's cgroup in it (/proc/self/cgroup)."""
    found = hierarchies()
    dirs = {p.name: p for p in found}
    v2 = CGROUP_FS if found == [CGROUP_FS] else dirs.get("unified")
    out: dict[Path, str] = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            d = dirs.get(ctrls.removeprefix("name=")) if ctrls else v2
            if d is not None:
                out[d] = path
    return out


def subtrees() -> list[tuple[Path, Path]]:
    """(hierarchy, the run's cgroup in it): CGROUP_SUBTREE under the cgroup the
    harness is in (so the run stays inside whatever limits the harness has)."""
    return [(h, h / path.lstrip("/") / CGROUP_SUBTREE) for h, path in own_cgroups().items()]


def make_cgroup_subtree() -> None:
    """The run's cgroup in every hierarchy (an empty leftover of an earlier
    run is reused; one with processes in it is not the run's to take)."""
    busy = [
        str(p.parent)
        for _, d in subtrees()
        if d.is_dir()
        for p in d.rglob("cgroup.procs")
        if p.read_text().strip()
    ]
    if busy:
        raise RunFailed(f"processes left in the run's cgroups (an earlier run?): {busy[:3]}")
    for _, d in subtrees():
        d.mkdir(exist_ok=True)
        # A new v1 cpuset starts with no CPUs or memory nodes: inherit them.
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (d.parent / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((d.parent / f).read_text())


def enter_cgroup_subtree() -> None:
    """Moves the calling process (the run's, between fork and exec) into the
    run's cgroups; what it starts stays under them."""
    for _, d in subtrees():
        (d / "cgroup.procs").write_text(str(os.getpid()))


def remove_cgroup_subtree(wait_s: float = 0.0) -> list[str]:
    """Removes the run's cgroups; retries for up to wait_s while the last
    processes of the run exit. Returns what is left."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [x for _, d in subtrees() for x in remove_cgroup_tree(d)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


SUBTREES_ENV = "KPY_NODE_E2E_CGROUPS"


def namespace_argv(argv: list[str]) -> list[str]:
    """argv run in a new mount namespace whose mounts do not propagate to the
    host's (nor the host's later ones into it), and a new cgroup namespace
    rooted at the run's cgroups (enter_cgroup_subtree first)."""
    return ["unshare", "--mount", "--cgroup", "--propagation", "private", *argv]


def subtrees_env() -> dict[str, str]:
    """The host paths of the run's cgroups, for the child (which, in its cgroup
    namespace, cannot tell them from /proc/self/cgroup)."""
    return {SUBTREES_ENV: ":".join(f"{h}={d}" for h, d in subtrees())}


def _host_subtree(h: Path) -> Path:
    for item in os.environ.get(SUBTREES_ENV, "").split(":"):
        key, _, value = item.partition("=")
        if key == str(h):
            return Path(value)
    raise RunFailed(f"the run's cgroup in {h} was not passed in ${SUBTREES_ENV}")


def in_namespace() -> bool:
    """True in a mount namespace other than the parent's (the harness's)."""
    return os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")


def make_paths_private(run_dir: Path) -> list[str]:
    """Inside the run's mount namespace: each cgroup hierarchy's root becomes
    the host's CGROUP_SUBTREE of it, and PRIVATE_PATHS bind mounts of
    run_dir/host/..., shared within the namespace (mount propagation to
    containers works as on a node). Returns the paths that had to be created
    on the host (empty mount points, removed again by remove_mount_points)."""
    if not in_namespace():
        raise RunFailed("refusing to bind-mount over host paths outside a private mount namespace")
    # In the run's cgroup namespace /proc/<pid>/cgroup is relative to the run's
    # cgroups: the files must be too, or runc and the kubelets look elsewhere.
    for h, path in own_cgroups().items():
        if path != "/":
            raise RunFailed(f"not in a cgroup namespace of the run's own ({h}: {path})")
        _mount(["--bind", str(_host_subtree(h)), str(h)])
    created = []
    for path in PRIVATE_PATHS:
        src = run_dir / "host" / path.lstrip("/")
        src.mkdir(parents=True, exist_ok=True)
        if not os.path.isdir(path):
            os.makedirs(path)
            created.append(path)
        _mount(["--bind", str(src), path])
        _mount(["--make-rshared", path])
    return created


def _mount(args: list[str]) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RunFailed(f"mount {' '.join(args)}: {r.stderr.strip()}")


def remove_mount_points(paths: list[str]) -> None:
    """The empty directories make_paths_private created on the host."""
    for path in reversed(paths):
        try:
            os.rmdir(path)
        except OSError:
            pass  # in use again by someone else, or not empty: leave it


def _routes() -> list[str]:
    r = subprocess.run(["ip", "-4", "route", "show", POD_SUBNET], capture_output=True, text=True)
    return r.stdout.splitlines()


def claim_pod_network() -> None:
    """The pod subnet must route to the run's bridge alone: a route to the same
    subnet on another device (another harness's bridge left behind) would take
    the node's traffic to its pods."""
    release_pod_network()
    others = [r for r in _routes() if f" dev {BRIDGE} " not in f"{r} "]
    if others:
        raise RunFailed(f"{POD_SUBNET} already routes elsewhere on this machine: {others}")


def release_pod_network() -> None:
    """The run's bridge (the CNI plugin leaves it behind), if there is one."""
    if os.path.exists(f"/sys/class/net/{BRIDGE}"):
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)


# The kubelet's defaults for the disk signals a config leaves out (the suite's
# config names only nodefs; the rest fall back to these).
DEFAULT_DISK_THRESHOLDS = {"imagefs.available": "15%", "imagefs.inodesFree": "5%"}


def disk_thresholds(config_hard: dict[str, str], flags: list[str]) -> dict[str, str]:
    """The percentage disk thresholds the run's kubelet will evict at: an
    --eviction-hard flag replaces the config's map, as the kubelet's flag does."""
    hard = {**DEFAULT_DISK_THRESHOLDS, **config_hard}
    for flag in flags:
        if flag.startswith("--eviction-hard="):
            pairs = (p.split("<", 1) for p in flag.split("=", 1)[1].split(",") if "<" in p)
            hard = {k.strip(): v.strip() for k, v in pairs}
    return {k: v for k, v in hard.items() if "fs." in k and v.endswith("%")}


def disk_pressure_notes(path: str, thresholds: dict[str, str]) -> list[str]:
    """What would put the run's node under DiskPressure before a spec runs:
    every pod of the suite is then refused, which reads as failing specs."""
    st = os.statvfs(path)
    free = {
        "available": 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 100.0,
        "inodesFree": 100.0 * st.f_favail / st.f_files if st.f_files else 100.0,
    }
    notes = []
    for signal_name, threshold in sorted(thresholds.items()):
        have = free[signal_name.split(".", 1)[1]]
        if have < float(threshold.rstrip("%")):
            notes.append(
                f"the disk of {path} has {have:.1f}% {signal_name.split('.', 1)[1]} against the "
                f"kubelet's {signal_name}<{threshold}: the node will report DiskPressure and "
                "refuse the suite's pods (free space, or pass --kubelet-flags=--eviction-hard=...)"
            )
    return notes
