"""Runtime pods no source wants and no worker runs (HandlePodCleanups' kill of
runtime pods): killed in the background, and the pod cache forgets them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kubelet import metrics
from kubelet.container.cache import PodCache
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.pleg.generic import Differ

log = logging.getLogger(__name__)


class RuntimeOrphans:
    """The scan over every runtime pod is skipped while nothing it depends on
    changed: the runtime's pods (the differ's change count), the desired pods,
    the workers and the kills under way."""

    def __init__(
        self,
        differ: Differ,
        runtime: RuntimeManager,
        cache: PodCache,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.differ = differ
        self.runtime = runtime
        self.cache = cache
        self.spawn = spawn
        self.killing: set[str] = set()  # UIDs whose kill is under way
        # What the last scan saw (desired pods' and workers' generations included).
        self._scan_key: tuple[int, int, int, int] | None = None

    def kill(
        self, desired: set[str], workers: set[str], desired_gen: int, workers_gen: int
    ) -> None:
        """Start killing the runtime pods outside desired and workers (whose
        generations say whether they changed since the last scan)."""
        key = (self.differ.changes, desired_gen, workers_gen, len(self.killing))
        if key == self._scan_key:
            return
        for u in self.differ.pod_ids():
            if u and u not in desired and u not in workers and u not in self.killing:
                metrics.ORPHANED_RUNTIME_PODS.inc()
                self.killing.add(u)
                self.spawn(self._kill(u))
        self._scan_key = (key[0], key[1], key[2], len(self.killing))

    async def _kill(self, u: str) -> None:
        try:
            status = await self.runtime.get_pod_status(u)
            log.info("Killing runtime pod %s (%s) that no source wants", u, status.name)
            await self.runtime.kill_pod(None, status, None, remove=True)
            self.cache.delete(u)
        except Exception as err:  # the next housekeeping finds the pod and tries again
            log.warning("Failed to kill orphaned pod %s, will retry: %s", u, err)
        finally:
            self.killing.discard(u)
