"""What a restarted kubelet finds on disk (reconstruct.go upstream): every
`<root>/pods/<uid>/volumes/<plugin~escaped>/<name>` and what is mounted on it.
Blocking: run in an executor."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kubelet.util import mountutil
from kubelet.volumemanager.subpath import subpath_volumes


@dataclass(frozen=True)
class FoundVolume:
    pod_uid: str
    plugin_name: str  # unescaped: kubernetes.io/empty-dir
    name: str
    dir: str
    fstype: str | None  # mounted at dir, or None


def pods_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "pods")


def list_pod_uids(root_dir: str) -> list[str]:
    try:
        with os.scandir(pods_dir(root_dir)) as it:
            return [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def scan_pod(root_dir: str, uid: str, table: dict[str, str]) -> list[FoundVolume] | None:
    """The volume dirs of one pod, and the volumes that only have subPath
    mounts left (hostPath volumes make no dir; plugin_name "", dir ""). None
    when the pod has neither."""
    pod_dir = os.path.join(pods_dir(root_dir), uid)
    vdir = os.path.join(pod_dir, "volumes")
    subpaths = subpath_volumes(pod_dir)
    try:
        plugins = [e for e in os.scandir(vdir) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        if not subpaths:
            return None
        plugins = []
    out = []
    for p in plugins:
        plugin_name = p.name.replace("~", "/")
        try:
            names = sorted(os.listdir(p.path))
        except OSError:
            continue
        for name in names:
            path = os.path.join(p.path, name)
            out.append(FoundVolume(uid, plugin_name, name, path, table.get(os.path.realpath(path))))
    with_dirs = {fv.name for fv in out}
    out.extend(FoundVolume(uid, "", name, "", None) for name in subpaths if name not in with_dirs)
    return out


def scan(
    root_dir: str, uids: list[str] | None = None, mountinfo: str = mountutil.MOUNTINFO
) -> dict[str, list[FoundVolume] | None]:
    """scan_pod for the given pods (all pods on disk by default), with one
    read of the mount table."""
    table = mountutil.mount_table(mountinfo)
    if uids is None:
        uids = list_pod_uids(root_dir)
    return {uid: scan_pod(root_dir, uid, table) for uid in uids}
