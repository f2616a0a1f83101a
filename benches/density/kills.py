"""Status latency on real containers: how long after a container dies the API
server shows it.

In the steady state the probe kills the main process of container "c" in K
running pods (SIGKILL to the host pid the runtime reports, a few per second),
and the run's pod watch tells it when each pod's status first shows the death
(that container no longer running). The pods of a run with kills have a
second container and restartPolicy Never (harness.Run._pod): the pod keeps
running and nothing is restarted, so the latency, from the kill to that watch
event, is the PLEG noticing (a relist period, or a container event), the pod
sync, the status write and the watch delivery, with no runc work in between.
Only the pods this run created are touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService

KILLED = "c"  # the container killed in each pod


@dataclass
class KillProbe:
    killed: dict[str, float] = field(default_factory=dict)  # pod name -> monotonic kill time
    seen: dict[str, float] = field(default_factory=dict)  # pod name -> first status showing it
    errors: list[str] = field(default_factory=list)

    def observe(self, name: str, pod: dict[str, Any], now: float) -> None:
        """Called by the run's watch for every pod event."""
        if name not in self.killed or name in self.seen:
            return
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == KILLED and "running" not in (cs.get("state") or {}):
                self.seen[name] = now
                return

    async def kill(self, endpoint: str, pods: list[str], count: int, rate: float) -> None:
        """SIGKILL container "c" of up to `count` of `pods` (names), `rate` per second."""
        rt = RemoteRuntimeService(endpoint, 60)
        try:
            running = await rt.list_containers(
                pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
            )
            by_pod = {
                c.labels.get("io.kubernetes.pod.name", ""): c.id
                for c in running
                if c.labels.get("io.kubernetes.container.name") == KILLED
            }
            targets = [p for p in pods if p in by_pod][:count]
            t0 = time.monotonic()
            for i, name in enumerate(targets):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    info = (await rt.container_status(by_pod[name], verbose=True)).info
                    pid = int(json.loads(info["info"])["pid"])
                    os.kill(pid, signal.SIGKILL)
                except (KeyError, ValueError, OSError) as err:
                    self.errors.append(f"{name}: {err}")
                    continue
                self.killed[name] = time.monotonic()
        finally:
            with contextlib.suppress(Exception):
                await rt.close()

    def latencies(self) -> list[float]:
        return sorted(self.seen[n] - t for n, t in self.killed.items() if n in self.seen)
