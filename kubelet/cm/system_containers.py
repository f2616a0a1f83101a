"""systemCgroups and kubeletCgroups (the system containers of
pkg/kubelet/cm/container_manager_linux.go).

systemCgroups: every process directly in the root cgroup, except init and
kernel threads, is moved into the named cgroup (made if missing), so that
what is not the kubelet, the runtime or a pod can be accounted and limited
apart. kubeletCgroups: the kubelet moves itself into the named cgroup. Either
way the kubelet keeps its own OOM score adjustment.

Operators set these on dedicated nodes only: systemCgroups moves every
host process of the root cgroup, which is what upstream does too.
"""

from __future__ import annotations

import errno
import logging
import os

from kubelet.cm.cgroup_manager import CgroupError, CgroupManager
from kubelet.util.oom import OOMAdjuster

log = logging.getLogger(__name__)

MOVE_ATTEMPTS = 11  # re-read the root this often: new processes keep arriving


class SystemContainerError(Exception):
    pass


def is_kernel_pid(pid: int, proc: str = "/proc") -> bool:
    """Kernel threads have no executable."""
    try:
        os.readlink(f"{proc}/{pid}/exe")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def cgroup_of(pid: int, proc: str = "/proc") -> dict[str, str]:
    """/proc/<pid>/cgroup as {controller: path}; v2's entry is under ""."""
    out: dict[str, str] = {}
    with open(f"{proc}/{pid}/cgroup") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) != 3:
                continue
            for ctrl in parts[1].split(",") if parts[1] else [""]:
                out[ctrl] = parts[2]
    return out


def container_of(pid: int, version: int, proc: str = "/proc") -> str:
    """The cgroup a process is in (getContainer): v2's path, or on v1 the cpu
    path, which must match the memory path."""
    cgs = cgroup_of(pid, proc)
    if version == 2:
        if "" not in cgs:
            raise SystemContainerError(f"no unified cgroup for PID {pid}")
        return cgs[""]
    cpu, memory = cgs.get("cpu"), cgs.get("memory")
    if cpu is None or memory is None:
        raise SystemContainerError(f"no cpu or memory cgroup for PID {pid}")
    if cpu != memory:
        raise SystemContainerError(
            f"cpu and memory cgroup hierarchy not unified.  cpu: {cpu}, memory: {memory}"
        )
    return cpu


def procs_of(mgr: CgroupManager, name: str) -> list[int]:
    """The processes directly in a cgroup (not its children), read from the
    devices hierarchy on v1 as upstream, else from any."""
    mounts = mgr.mounts
    ctrl = next((c for c in ("devices", "", "memory", "cpu") if c in mounts), None)
    if ctrl is None:
        raise SystemContainerError("no cgroup mount")
    path = os.path.join(mounts[ctrl], name.strip("/"), "cgroup.procs")
    try:
        with open(path) as fh:
            return [int(x) for x in fh.read().split()]
    except OSError as err:
        raise SystemContainerError(f"failed to list PIDs for {name}: {err}") from err


def ensure_system_cgroups(mgr: CgroupManager, root: str, name: str, proc: str = "/proc") -> None:
    """Move the non-kernel processes of `root` (but init) into `name`."""
    try:
        mgr.create(name)
    except (OSError, CgroupError) as err:
        raise SystemContainerError(f"failed to create system container {name!r}: {err}") from err
    final: str | None = None
    for _ in range(MOVE_ATTEMPTS):
        pids = [p for p in procs_of(mgr, root) if p != 1 and not is_kernel_pid(p, proc)]
        if not pids:
            return
        log.debug("Moving non-kernel processes %s into %s", pids, name)
        for pid in pids:
            try:
                mgr.attach(name, pid)
            except OSError as err:
                if err.errno == errno.ESRCH:
                    continue  # exited meanwhile
                final = f"failed to move PID {pid} into the system container {name!r}: {err}"
    if final:
        raise SystemContainerError(final)


def in_host_pid_namespace(pid: int, proc: str = "/proc") -> bool:
    try:
        return os.readlink(f"{proc}/1/ns/pid") == os.readlink(f"{proc}/{pid}/ns/pid")
    except OSError as err:
        raise SystemContainerError(f"failed to find pid namespace of process {pid}") from err


def ensure_process_in_container(
    pid: int,
    oom_score_adj: int,
    mgr: CgroupManager,
    name: str | None,
    oom: OOMAdjuster,
    proc: str = "/proc",
) -> list[str]:
    """Put `pid` into cgroup `name` (when given) and set its OOM score; the
    problems. A process outside the host's PID namespace is left alone."""
    try:
        if not in_host_pid_namespace(pid, proc):
            log.debug("PID %d is not running in the host namespace", pid)
            return []
    except SystemContainerError as err:
        return [str(err)]
    problems: list[str] = []
    if name is not None:
        try:
            current = container_of(pid, mgr.version, proc)
        except (OSError, SystemContainerError) as err:
            problems.append(f"failed to find container of PID {pid}: {err}")
            current = None
        if current != "/" + name.strip("/"):
            try:
                mgr.create(name)
                mgr.attach(name, pid)
            except (OSError, CgroupError) as err:
                problems.append(f"failed to move PID {pid} (in {current!r}) to {name!r}: {err}")
    try:
        oom.apply_oom_score_adj(pid, oom_score_adj)
    except (OSError, ValueError) as err:
        problems.append(f"failed to apply oom score {oom_score_adj} to PID {pid}: {err}")
    return problems
