"""The order in which a pod's containers stop (kuberuntime_termination_order.go)."""

from __future__ import annotations

import asyncio
import time

from kubelet.kuberuntime.helpers import is_restartable_init
from kubelet.types import Pod


class TerminationOrdering:
    """Sidecars stop last: each running restartable init container waits for
    every main container and every sidecar after it in the spec. Built per
    kill, never shared between pods."""

    def __init__(self, pod: Pod, running: set[str]) -> None:
        self._done = {n: asyncio.Event() for n in running}
        mains = [c["name"] for c in pod["spec"]["containers"] if c["name"] in running]
        sidecars = [
            c["name"]
            for c in pod["spec"].get("initContainers") or []
            if is_restartable_init(c) and c["name"] in running
        ]
        self._after: dict[str, list[str]] = {
            s: mains + sidecars[i + 1 :] for i, s in enumerate(sidecars)
        }

    async def wait_for_turn(self, cname: str, timeout: float) -> float:
        """Wait (at most timeout seconds) until the containers this one follows
        have stopped; answers the seconds waited."""
        start = time.monotonic()
        waits = [self._done[n].wait() for n in self._after.get(cname, ())]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout)
            except TimeoutError:
                pass
        return time.monotonic() - start

    def terminated(self, cname: str) -> None:
        ev = self._done.get(cname)
        if ev is not None:
            ev.set()
