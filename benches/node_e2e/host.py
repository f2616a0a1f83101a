"""The machine-wide parts of a node e2e run, and their cleanup.

The suite hard-codes what a node it owns would have: the kubelet's root
directory /var/lib/kubelet (pod-resources socket, CPU/memory manager state,
device-plugin sockets), the kubelet's ports 10248/10250/10255, the API
server's 6443, and pod cgroups under /kubepods (cgroupRoot "/"). So a run
takes a machine-wide lock, refuses to start where any of these is in use by
something else, and leaves none of them behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from benches.conformance.harness import RunFailed

LOCK = "/tmp/kpy-node-e2e.lock"
KUBELET_ROOT = Path("/var/lib/kubelet")
ROOT_MARKER = ".kpy-node-e2e"
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
    """No other kubelet may own /kubepods: the two would remove each other's
    pod cgroups as orphans. Empty leftovers of an earlier run are removed."""
    busy = []
    for h in hierarchies():
        for name in TOP_CGROUPS:
            busy += remove_cgroup_tree(h / name)
    if busy:
        raise RunFailed(
            f"cgroups in use by another kubelet (cgroupRoot '/'): {busy[:3]}; "
            "the node e2e suite needs /kubepods for itself"
        )


def unmount_under(prefix: str) -> None:
    with open("/proc/self/mounts") as fh:
        mounts = [line.split()[1] for line in fh]
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)


def claim_kubelet_root() -> None:
    """/var/lib/kubelet for this run: absent, or left by an earlier run of
    this harness (its marker); anything else is another kubelet's."""
    if KUBELET_ROOT.exists() and not (KUBELET_ROOT / ROOT_MARKER).exists():
        if any(KUBELET_ROOT.iterdir()):
            raise RunFailed(
                f"{KUBELET_ROOT} exists and was not made by this harness: "
                "the node e2e suite needs it for its own kubelet"
            )
    release_kubelet_root()
    KUBELET_ROOT.mkdir(parents=True)
    (KUBELET_ROOT / ROOT_MARKER).write_text("made by benches.node_e2e\n")


def release_kubelet_root() -> None:
    if not KUBELET_ROOT.exists():
        return
    unmount_under(str(KUBELET_ROOT) + "/")
    # Never follow links out of it (a pod's volume may hold anything).
    shutil.rmtree(KUBELET_ROOT, ignore_errors=True)


def release_cgroups() -> list[str]:
    left = []
    for h in hierarchies():
        for name in TOP_CGROUPS:
            left += remove_cgroup_tree(h / name)
    return left


@contextlib.contextmanager
def claimed() -> Iterator[None]:
    """The machine-wide parts for the length of one kubelet's run; released
    only when this run had claimed them."""
    fd = take_lock()
    owned = False
    try:
        check_ports()
        check_cgroups()
        claim_kubelet_root()
        owned = True
        yield
    finally:
        if owned:
            release_kubelet_root()
            release_cgroups()
        os.close(fd)
