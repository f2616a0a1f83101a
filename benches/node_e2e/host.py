"""The machine-wide parts of a node e2e run, and their cleanup.

The suite hard-codes what a node it owns would have: the kubelet's root
directory /var/lib/kubelet (pod-resources socket, CPU/memory manager state,
device-plugin sockets), /var/log/pods, the kubelet's ports 10248/10250/10255,
the API server's 6443, and pod cgroups under /kubepods (cgroupRoot "/").

On a machine shared with other kubelets, each run gets the paths from a mount
namespace of its own (see in_namespace): there /var/lib/kubelet and the log
directories are bind mounts of directories in the run's work directory, so
neither the host's copies nor other kubelets' files are touched, and every
mount the run makes goes when it ends. Ports and cgroups cannot be made
private that way: a machine-wide lock, and a run refuses to start where
another kubelet holds them.
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
PRIVATE_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers")
# The pod network: the suite's podCIDR (test/e2e_node/jenkins), on a bridge of
# the run's own. One run at a time (the lock), so fixed names do.
POD_SUBNET = "10.100.0.0/24"
BRIDGE = "kpne2e0"
# API server (in the e2e binary), kubelet server, healthz, read-only port.
FIXED_PORTS = (6443, 10250, 10248, 10255)
CGROUP_FS = Path("/sys/fs/cgroup")
# The cgroups the kubelets create at the top of each hierarchy: the pods', and
# the kubelet's own (kubeletCgroups, which the suite sets when it launches the
# kubelet through systemd-run).
TOP_CGROUPS = ("kubepods", "kubelet.slice")


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


def check_cgroups() -> None:
    """No other kubelet may be running pods under /kubepods: the two would
    remove each other's pod cgroups as orphans. (Empty directories are left
    for the run's kubelet to reuse: they may be another kubelet's, idle.)"""
    busy = []
    for h in hierarchies():
        for name in TOP_CGROUPS:
            root = h / name
            if root.is_dir():
                busy += [str(p.parent) for p in root.rglob("cgroup.procs") if p.read_text().strip()]
    if busy:
        raise RunFailed(
            f"processes in cgroups of another kubelet with cgroupRoot '/': {busy[:3]}; "
            "the node e2e suite needs /kubepods to itself"
        )


def release_cgroups(wait_s: float = 0.0) -> list[str]:
    """Removes the TOP_CGROUPS trees; retries for up to wait_s while the last
    processes of a run exit. Returns what is left."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for h in hierarchies():
            for name in TOP_CGROUPS:
                left += remove_cgroup_tree(h / name)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def namespace_argv(argv: list[str]) -> list[str]:
    """argv run in a new mount namespace whose mounts do not propagate to the
    host's (nor the host's later ones into it)."""
    return ["unshare", "--mount", "--propagation", "private", *argv]


def in_namespace() -> bool:
    """True in a mount namespace other than the parent's (the harness's)."""
    return os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")


def make_paths_private(run_dir: Path) -> list[str]:
    """Inside the run's mount namespace: PRIVATE_PATHS become bind mounts of
    run_dir/host/..., shared within the namespace (mount propagation to
    containers works as on a node). Returns the paths that had to be created
    on the host (empty mount points, removed again by remove_mount_points)."""
    if not in_namespace():
        raise RunFailed("refusing to bind-mount over host paths outside a private mount namespace")
    created = []
    for path in PRIVATE_PATHS:
        src = run_dir / "host" / path.lstrip("/")
        src.mkdir(parents=True, exist_ok=True)
        if not os.path.isdir(path):
            os.makedirs(path)
            created.append(path)
        for cmd in (["mount", "--bind", str(src), path], ["mount", "--make-rshared", path]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RunFailed(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return created


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
