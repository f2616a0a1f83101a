"""Probe workers and their results (pkg/kubelet/prober: prober_manager.go, worker.go,
results). One asyncio task per (pod, container, probe type):

- readiness starts as failure and decides the container's `ready`;
- liveness and startup start as success/unknown; a failure that reaches
  failureThreshold marks the container for a restart (the runtime manager kills
  it as upstream does) and the worker holds until a new container appears;
- liveness and readiness wait until the startup probe succeeded;
- initialDelaySeconds counts from the container's start, results change only
  after successThreshold / failureThreshold consecutive outcomes, and every
  failed attempt records an Unhealthy event.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from kubelet import metrics
from kubelet import types as v1
from kubelet.events import Recorder
from kubelet.prober.prober import Prober, Result
from kubelet.types import (
    Container,
    Pod,
    Probe,
    container_field_path,
    name,
    namespace,
    object_ref,
    uid,
)

log = logging.getLogger(__name__)

KINDS = (
    ("startup", "startupProbe"),
    ("liveness", "livenessProbe"),
    ("readiness", "readinessProbe"),
)
INITIAL = {"readiness": Result.FAILURE, "liveness": Result.SUCCESS, "startup": Result.UNKNOWN}
# prober_probe_total's result label, as upstream.
_METRIC_RESULT = {Result.SUCCESS: "successful", Result.FAILURE: "failed", Result.UNKNOWN: "unknown"}


def _started_at(cs: v1.ContainerStatus) -> float | None:
    ts = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
    if not ts:
        return None
    try:
        return (
            datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=datetime.UTC)
            .timestamp()
        )
    except ValueError:
        return None


@dataclass
class _WorkerState:
    """One probe worker's memory: the container it probes, the run of equal
    results, and whether it holds after a failure that restarts the container."""

    cid: str = ""
    count: int = 0
    last: Result | None = None
    hold: bool = False


def _probe_of(c: Container, kind: str) -> Probe | None:
    if kind == "startup":
        return c.get("startupProbe")
    if kind == "liveness":
        return c.get("livenessProbe")
    return c.get("readinessProbe")


class ProbeManager:
    def __init__(
        self,
        prober: Prober,
        status_of: Callable[[str], v1.PodStatus | None],
        on_change: Callable[[str], None],
        recorder: Recorder | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.prober = prober
        self.status_of = status_of  # pod UID -> the kubelet's latest API status
        self.on_change = on_change  # pod UID: a result changed, sync the pod
        self.recorder = recorder
        self.clock = clock or (lambda: datetime.datetime.now(datetime.UTC).timestamp())
        self.results: dict[str, dict[str, Result]] = {k: {} for k, _ in KINDS}  # kind -> cid
        # pod UID -> (container, kind) -> worker: removing a pod touches only its own.
        self._workers: dict[str, dict[tuple[str, str], asyncio.Task[None]]] = {}

    # ------------------------------------------------------------- queries
    def is_ready(self, container: Container, cid: str) -> bool:
        if "readinessProbe" not in container:
            return True
        return self.results["readiness"].get(cid) is Result.SUCCESS

    def is_started(self, container: Container, cid: str) -> bool:
        if "startupProbe" not in container:
            return True
        return self.results["startup"].get(cid) is Result.SUCCESS

    def must_restart(self, cid: str) -> str | None:
        """Why a running container has to be killed, or None."""
        if self.results["liveness"].get(cid) is Result.FAILURE:
            return "failed liveness probe"
        if self.results["startup"].get(cid) is Result.FAILURE:
            return "failed startup probe"
        return None

    # ------------------------------------------------------------ workers
    def add_pod(self, pod: Pod) -> None:
        u = uid(pod)
        workers = self._workers.get(u)
        # Sidecars (restartable init containers) are probed like regular containers.
        sidecars = [
            c for c in pod["spec"].get("initContainers") or [] if c.get("restartPolicy") == "Always"
        ]
        for c in [*(pod["spec"].get("containers") or []), *sidecars]:
            for kind, _field in KINDS:
                spec = _probe_of(c, kind)
                if spec is None:
                    continue
                if workers is None:
                    workers = self._workers[u] = {}
                key = (c["name"], kind)
                if key not in workers:
                    workers[key] = asyncio.create_task(
                        self._worker(pod, c, kind, spec), name=f"probe-{kind}-{u}-{c['name']}"
                    )

    def remove_pod(self, pod_uid: str) -> None:
        for task in (self._workers.pop(pod_uid, None) or {}).values():
            task.cancel()  # the worker drops its result as it ends

    async def stop(self) -> None:
        tasks = [t for w in self._workers.values() for t in w.values()]
        self._workers.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.prober.close()

    def __len__(self) -> int:
        return sum(len(w) for w in self._workers.values())

    async def _worker(self, pod: Pod, c: Container, kind: str, spec: Probe) -> None:
        period = max(1, int(spec.get("periodSeconds") or 10))
        # Spread the first probes of pods created together (upstream: up to one period).
        await asyncio.sleep(random.random() * min(period, 1))
        state = _WorkerState()
        try:
            while True:
                try:
                    await self._probe_once(pod, c, kind, spec, state)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the probe worker lives as long as its container
                    log.exception("%s probe of %s/%s failed to run", kind, uid(pod), c["name"])
                await asyncio.sleep(period)
        finally:
            # A removed pod's results go with its workers, or they pile up forever.
            if state.cid:
                self.results[kind].pop(state.cid, None)
            for result in _METRIC_RESULT.values():
                labels = (kind.capitalize(), result, c["name"], name(pod), namespace(pod), uid(pod))
                try:
                    metrics.PROBER_PROBE_TOTAL.remove(*labels)
                except KeyError:
                    pass

    async def _probe_once(
        self, pod: Pod, c: Container, kind: str, spec: Probe, state: _WorkerState
    ) -> None:
        u = uid(pod)
        st: v1.PodStatus = self.status_of(u) or {}
        statuses = [*(st.get("containerStatuses") or []), *(st.get("initContainerStatuses") or [])]
        cs = next((x for x in statuses if x["name"] == c["name"]), None)
        cid = (cs.get("containerID", "") if cs is not None else "").split("://", 1)[-1]
        results = self.results[kind]
        if cid != state.cid:
            # A new container: start over from the initial result.
            if state.cid:
                results.pop(state.cid, None)
            state.cid, state.count, state.last, state.hold = cid, 0, None, False
            if cid:
                results[cid] = INITIAL[kind]
        if not cid or state.hold:
            return
        if kind == "startup" and results.get(cid) is Result.SUCCESS:
            return  # a started container is never probed for startup again, as upstream
        if cs is None or "running" not in (cs.get("state") or {}):
            if kind == "readiness" and results.get(cid) is not Result.FAILURE:
                results[cid] = Result.FAILURE
                self.on_change(u)
            return
        if kind != "startup" and "startupProbe" in c:
            if self.results["startup"].get(cid) is not Result.SUCCESS:
                return  # nothing but the startup probe runs until it succeeds
        started = _started_at(cs)
        delay = int(spec.get("initialDelaySeconds") or 0)
        if started is not None and self.clock() - started < delay:
            return
        live_pod = pod.copy()
        live_pod["status"] = st
        result, output = await self.prober.probe(live_pod, c, cid, spec)
        if result is Result.WARNING:
            self._event(pod, c, kind, output, warning=True)
            result = Result.SUCCESS
        metrics.PROBER_PROBE_TOTAL.labels(
            kind.capitalize(), _METRIC_RESULT[result], c["name"], name(pod), namespace(pod), u
        ).inc()
        if result is Result.UNKNOWN:
            return  # an error running the probe changes nothing
        if result is Result.FAILURE:
            self._event(pod, c, kind, output)
        if result is state.last:
            state.count += 1
        else:
            state.last, state.count = result, 1
        if result is Result.SUCCESS:
            threshold = int(spec.get("successThreshold") or 1)
        else:
            threshold = int(spec.get("failureThreshold") or 3)
        if state.count < threshold or results.get(cid) is result:
            return
        results[cid] = result
        log.info("%s probe of %s/%s: %s", kind, name(pod), c["name"], result.value)
        if kind in ("liveness", "startup") and result is Result.FAILURE:
            state.hold = True  # until the restarted container replaces this one
        self.on_change(u)

    def _event(self, pod: Pod, c: Container, kind: str, output: str, warning: bool = False) -> None:
        if self.recorder is None:
            return
        ref = object_ref(pod, container_field_path(pod, c["name"]))
        what = kind.capitalize()
        if warning:
            self.recorder.event(ref, "Warning", "ProbeWarning", f"{what} probe warning: {output}")
            return
        self.recorder.event(ref, "Warning", "Unhealthy", f"{what} probe failed: {output}".strip())
