"""The density run's real runtime: a private containerd with runc, one per run.

Each run claims a slot (the conformance harness's lock files, so no two harnesses
on this machine share a bridge, a pod subnet or a cgroup root), starts a fresh
containerd with the locally built pause and busybox images, and gives the
kubelet its own cgroupRoot. Afterwards everything is undone: sandboxes the
kubelet left are stopped and removed through CRI (that tears down their network
namespaces and veths), containerd is stopped, its shims killed, its mounts
unmounted, and the processes still in the run's cgroups killed before the
cgroups are removed. Only what this run started is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benches.conformance.harness import (
    _hierarchies,
    claim_slot,
    make_cgroup_root,
    remove_cgroup_root,
)
from benches.procmetrics import proc_cpu_s, proc_rss_mib
from kubelet.testing.containerd import Containerd


@dataclass
class Usage:
    """CPU seconds so far and memory of containerd and its shims, at one instant."""

    containerd_cpu_s: float
    containerd_rss_mib: float
    shim_cpu_s: dict[int, float]  # pid -> CPU seconds
    shims_rss_mib: float
    shims_pss_mib: float


def _pss_mib(pid: int) -> float:
    """Proportional set size: the shims share one binary's pages, so the sum
    of their RSS counts those pages once per shim."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class ContainerdRuntime:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ctd: Containerd | None = None
        self.cgroup_root = ""
        self._lock = -1
        self._short = ""  # a directory outside the run's, made by start()

    def start(self) -> str:
        """Start containerd; returns its CRI endpoint."""
        slot, self._lock = claim_slot()
        # Slots 20..83 get distinct /22s (1,022 pod addresses each), outside
        # every other harness's 10.244/16 and 10.245/16 subnets.
        subnet = f"10.246.{(slot * 4) % 256}.0/22"
        self.cgroup_root = f"kpy-density-{slot}"
        make_cgroup_root(self.cgroup_root)
        directory = str(self.directory)
        if len(directory) > 80:
            # containerd refuses unix socket paths over 104 bytes (its ttrpc
            # socket adds 14): a short directory, linked from the run's.
            directory = tempfile.mkdtemp(prefix="kpyd-")
            self.directory.symlink_to(directory)
            self._short = directory
        self.ctd = Containerd(directory, subnet=subnet, bridge=f"kpd{slot}")
        # Imports the pause and busybox images; on this shared machine under load
        # containerd has taken over 30 s to answer its first call.
        self.ctd.start(timeout=120)
        return self.ctd.endpoint

    @property
    def pid(self) -> int | None:
        if self.ctd is None or self.ctd.proc is None:
            return None
        return self.ctd.proc.pid

    def alive(self) -> bool:
        return self.ctd is not None and self.ctd.proc is not None and self.ctd.proc.poll() is None

    def shim_pids(self) -> list[int]:
        return [] if self.ctd is None else self.ctd.shim_pids()

    def usage(self, pss: bool = False) -> Usage | None:
        pid = self.pid
        if pid is None:
            return None
        shim_cpu: dict[int, float] = {}
        rss = pss_sum = 0.0
        for p in self.shim_pids():
            try:
                shim_cpu[p] = proc_cpu_s(p)
                rss += proc_rss_mib(p)
            except (OSError, IndexError, ValueError):
                continue  # exited between the listing and the read
            if pss:
                pss_sum += _pss_mib(p)
        return Usage(proc_cpu_s(pid), proc_rss_mib(pid), shim_cpu, rss, pss_sum)

    async def remove_sandboxes(self) -> int:
        """Stop and remove every sandbox left: after a delete-all they are
        stopped but wait for the kubelet's garbage collection; after a run that
        failed half-way they may still run, and StopPodSandbox then tears down
        their network, so no netns or veth leaks. Returns how many were still
        ready."""
        if not self.alive():
            return 0
        from kubelet.cri.api import api_pb2 as pb
        from kubelet.cri.remote import RemoteRuntimeService

        assert self.ctd is not None
        rt = RemoteRuntimeService(self.ctd.endpoint, 60)
        try:
            boxes = await rt.list_pod_sandbox()
            sem = asyncio.Semaphore(16)

            async def one(sid: str) -> None:
                async with sem:
                    with contextlib.suppress(Exception):
                        await rt.stop_pod_sandbox(sid)
                        await rt.remove_pod_sandbox(sid)

            await asyncio.gather(*(one(b.id) for b in boxes))
            return sum(b.state == pb.SANDBOX_READY for b in boxes)
        except Exception:
            return 0
        finally:
            await rt.close()

    def stop(self) -> None:
        if self.ctd is not None:
            self.ctd.stop()
        if self._short:
            # Nothing outside the run's directory is left but the log and config.
            for sub in ("root", "state", "images", "cni"):
                shutil.rmtree(os.path.join(self._short, sub), ignore_errors=True)
        if self.cgroup_root:
            self._kill_cgroup_procs()
            remove_cgroup_root(self.cgroup_root)
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def _kill_cgroup_procs(self) -> None:
        """Container processes whose shim was killed live on, reparented; the
        run's own cgroup root holds only what its containerd started."""
        for _ in range(20):
            pids: set[int] = set()
            for h in _hierarchies():
                root = h / self.cgroup_root
                if root.is_dir():
                    for procs in root.rglob("cgroup.procs"):
                        with contextlib.suppress(OSError, ValueError):
                            pids.update(int(x) for x in procs.read_text().split())
            if not pids:
                return
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.25)
