"""The node shutdown manager (nodeshutdown_manager_linux.go upstream).

It follows logind's delay-inhibitor protocol: at start it makes sure logind
grants at least the configured budget (InhibitDelayMaxSec raised through a
drop-in and a reload when it is smaller) and takes a delay lock for shutdown.
On PrepareForShutdown(true) the node reports NotReady ("node is shutting
down"), new pods are refused, the active pods are stopped in priority groups
with the status Failed / Terminated and the DisruptionTarget condition, and
the lock is released so the shutdown goes on. PrepareForShutdown(false) (a
cancelled shutdown) takes the lock again and lets the node report Ready.
A lost bus connection is retried every second; no system bus at start
means graceful shutdown is unavailable, which is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from prometheus_client import Gauge

from kubelet import metrics
from kubelet.apis.config import KubeletConfiguration
from kubelet.features import Feature, FeatureGate
from kubelet.lifecycle.predicate import Rejection
from kubelet.nodeshutdown import systemd
from kubelet.nodeshutdown.groups import (
    GracePeriodByPriority,
    KillPodFunc,
    PodKiller,
    migrate_config,
)
from kubelet.nodeshutdown.storage import STATE_FILE, LocalStorage, State
from kubelet.types import Pod
from kubelet.util.duration import format_duration
from kubelet.util.logs import level_for

log = logging.getLogger(__name__)
V1 = level_for(1)

NOT_ADMITTED_REASON = "NodeShutdown"
NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down."
SHUTTING_DOWN = "node is shutting down"
DBUS_RECONNECT_PERIOD = 1.0
# logind reads the drop-in on SIGHUP, after KillUnit has answered: look again
# for a little while before calling the raise a failure.
RELOAD_CHECKS, RELOAD_CHECK_PERIOD = 10, 0.2

START_TIME = Gauge(
    "kubelet_graceful_shutdown_start_time_seconds",
    "Last graceful shutdown start time since unix epoch in seconds",
    registry=None,
)
END_TIME = Gauge(
    "kubelet_graceful_shutdown_end_time_seconds",
    "Last graceful shutdown end time since unix epoch in seconds",
    registry=None,
)


class ShutdownManagerError(Exception):
    """Graceful shutdown cannot be set up (the message says why)."""


class Inhibiter(Protocol):
    """What the manager asks of logind (dbusInhibiter upstream)."""

    async def current_inhibit_delay(self) -> float: ...
    async def inhibit_shutdown(self) -> int: ...
    def release_inhibit_lock(self, fd: int) -> None: ...
    async def reload_logind_conf(self) -> None: ...
    async def monitor_shutdown(self) -> asyncio.Queue[bool | None]: ...
    def close(self) -> None: ...


# dbus_fast's own errors reach here as DBusCallError (systemd.DBusCon).
_START_ERRORS = (OSError, EOFError, TimeoutError, systemd.DBusCallError, ShutdownManagerError)


def shutdown_periods(
    config: KubeletConfiguration, gates: FeatureGate
) -> list[GracePeriodByPriority]:
    by_priority = config.shutdown_grace_period_by_pod_priority
    if not gates.enabled(Feature.GracefulNodeShutdownBasedOnPodPriority) or not by_priority:
        return migrate_config(
            config.shutdown_grace_period, config.shutdown_grace_period_critical_pods
        )
    return [
        GracePeriodByPriority(
            int(e.get("priority", 0)), int(e.get("shutdownGracePeriodSeconds", 0))
        )
        for e in by_priority
    ]


def register_metrics(gates: FeatureGate) -> None:
    """The start and end gauges, served whenever both shutdown gates are on,
    shutdown configured or not, as upstream registers them."""
    if gates.enabled(Feature.GracefulNodeShutdown) and gates.enabled(
        Feature.GracefulNodeShutdownBasedOnPodPriority
    ):
        metrics.register_once(START_TIME, END_TIME)


class NodeShutdownManager:
    def __init__(
        self,
        periods: Sequence[GracePeriodByPriority],
        kill_pod: KillPodFunc,
        active_pods: Callable[[], list[Pod]],
        state_dir: str,
        on_status_change: Callable[[], None] = lambda: None,
        node_event: Callable[[str, str, str], None] = lambda t, r, m: None,
        connect: Callable[[], Awaitable[Inhibiter]] = systemd.DBusCon.connect,
        logind_conf_dir: str = systemd.LOGIND_CONF_DIR,
        enable_metrics: bool = True,
    ) -> None:
        self.killer = PodKiller(periods, kill_pod)
        self.active_pods = active_pods
        self.on_status_change = on_status_change
        self.node_event = node_event
        self.connect = connect
        self.logind_conf_dir = logind_conf_dir
        self.storage = LocalStorage(os.path.join(state_dir, STATE_FILE))
        self.enable_metrics = enable_metrics
        self._con: Inhibiter | None = None
        self._lock: int | None = None
        self._shutting_down = False
        if enable_metrics:
            metrics.register_once(START_TIME, END_TIME)

    @classmethod
    def from_config(
        cls,
        config: KubeletConfiguration,
        gates: FeatureGate,
        kill_pod: KillPodFunc,
        active_pods: Callable[[], list[Pod]],
        state_dir: str,
        on_status_change: Callable[[], None],
        node_event: Callable[[str, str, str], None],
    ) -> NodeShutdownManager | None:
        """None (as upstream's stub) when the gate is off or no period is configured."""
        register_metrics(gates)
        if not gates.enabled(Feature.GracefulNodeShutdown):
            return None
        periods = shutdown_periods(config, gates)
        if not periods:
            return None
        log.info(
            "Creating node shutdown manager: shutdownGracePeriodRequested=%s "
            "shutdownGracePeriodCriticalPods=%s shutdownGracePeriodByPodPriority=%s",
            format_duration(config.shutdown_grace_period),
            format_duration(config.shutdown_grace_period_critical_pods),
            [(p.priority, p.shutdown_grace_period_seconds) for p in sorted(periods)],
        )
        return cls(
            periods, kill_pod, active_pods, state_dir, on_status_change, node_event,
            enable_metrics=gates.enabled(Feature.GracefulNodeShutdownBasedOnPodPriority),
        )  # fmt: skip

    # ------------------------------------------------------------- queries
    def shutdown_status(self) -> str | None:
        """Why the node is not Ready, while it shuts down."""
        return SHUTTING_DOWN if self._shutting_down else None

    def admit(self, pod: Pod) -> Rejection | None:
        if self._shutting_down:
            return Rejection(NOT_ADMITTED_REASON, NOT_ADMITTED_MESSAGE)
        return None

    @property
    def holds_lock(self) -> bool:
        return self._lock is not None

    # ---------------------------------------------------------------- loop
    async def run(self, stop: asyncio.Event) -> None:
        events: asyncio.Queue[bool | None] | None
        try:
            events = await self._start()
        except _START_ERRORS as err:
            # Not fatal for the kubelet, as upstream: it runs without it.
            log.error("Failed to start node shutdown manager: %s", err)
            return
        self._set_metrics()
        try:
            while not stop.is_set():
                if events is not None:
                    await self._watch(events, stop)
                    events = None
                if stop.is_set():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), DBUS_RECONNECT_PERIOD)
                    return
                log.log(V1, "Restarting watch for node shutdown events")
                try:
                    events = await self._start()
                except _START_ERRORS as err:
                    log.error("Unable to watch the node for shutdown events: %s", err)
        finally:
            self._release_lock()
            self._close()

    async def _start(self) -> asyncio.Queue[bool | None]:
        self._close()
        con = await self.connect()
        self._con = con
        try:
            await self._ensure_inhibit_delay(con)
            await self._acquire_inhibit_lock()
            try:
                return await con.monitor_shutdown()
            except _START_ERRORS as err:
                self._release_lock()
                raise ShutdownManagerError(f"failed to monitor shutdown: {err}") from None
        except BaseException:
            self._close()
            raise

    async def _ensure_inhibit_delay(self, con: Inhibiter) -> None:
        """InhibitDelayMaxSec at least the sum of the group budgets, raised if need be."""
        requested = self.killer.period_requested()
        current = await con.current_inhibit_delay()
        if requested <= current:
            return
        try:
            systemd.override_inhibit_delay(requested, self.logind_conf_dir)
        except OSError as err:
            raise ShutdownManagerError(
                f"unable to override inhibit delay by shutdown manager: {err}"
            ) from None
        await con.reload_logind_conf()
        updated = await con.current_inhibit_delay()
        for _ in range(RELOAD_CHECKS):
            if requested <= updated:
                return
            await asyncio.sleep(RELOAD_CHECK_PERIOD)
            updated = await con.current_inhibit_delay()
        if requested > updated:
            raise ShutdownManagerError(
                f"node shutdown manager was unable to update logind InhibitDelayMaxSec to "
                f"{format_duration(requested)} (ShutdownGracePeriod), current value of "
                f"InhibitDelayMaxSec ({format_duration(updated)}) is less than requested "
                "ShutdownGracePeriod"
            )

    async def _acquire_inhibit_lock(self) -> None:
        assert self._con is not None
        fd = await self._con.inhibit_shutdown()
        self._release_lock()
        self._lock = fd

    def _release_lock(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None and self._con is not None:
            try:
                self._con.release_inhibit_lock(fd)
            except systemd.DBusCallError as err:
                log.error("%s", err)
        elif fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _close(self) -> None:
        con, self._con = self._con, None
        if con is not None:
            con.close()

    async def _watch(self, events: asyncio.Queue[bool | None], stop: asyncio.Event) -> None:
        """Act on PrepareForShutdown signals until the connection ends or stop."""
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                getter = asyncio.ensure_future(events.get())
                await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    return
                shutting_down = getter.result()
                if shutting_down is None:
                    log.error("Ended watching the node for shutdown events")
                    return
                await self._on_event(shutting_down)
        finally:
            stopper.cancel()

    async def _on_event(self, shutting_down: bool) -> None:
        kind = "shutdown" if shutting_down else "cancelled"
        log.log(V1, "Shutdown manager detected new shutdown event: %s", kind)
        message = "Shutdown manager detected shutdown " + (
            "event" if shutting_down else "cancellation"
        )
        self.node_event("Normal", "Shutdown", message)
        self._shutting_down = shutting_down
        self.on_status_change()
        if shutting_down:
            await self._process_shutdown_event()
            return
        try:
            await self._acquire_inhibit_lock()
        except _START_ERRORS as err:
            log.error("Failed to take the shutdown inhibitor lock again: %s", err)

    async def _process_shutdown_event(self) -> None:
        log.log(V1, "Shutdown manager processing shutdown event")
        active = self.active_pods()
        start = time.time()
        if self.enable_metrics:
            self._store(State(start_time=start))
            START_TIME.set(start)
            END_TIME.set(0)
        try:
            await self.killer.kill_pods(active)
        finally:
            if self.enable_metrics:
                end = time.time()
                self._store(State(start_time=start, end_time=end))
                END_TIME.set(end)
            self._release_lock()
            log.log(V1, "Shutdown manager completed processing shutdown event, node will "
                    "shutdown shortly")  # fmt: skip

    def _store(self, state: State) -> None:
        try:
            self.storage.store(state)
        except OSError as err:
            log.error("Failed to store graceful shutdown state: %s", err)

    def _set_metrics(self) -> None:
        if not self.enable_metrics:
            return
        try:
            state = self.storage.load()
        except (OSError, ValueError) as err:
            log.error("Failed to load graceful shutdown state: %s", err)
            return
        if state.start_time:
            START_TIME.set(state.start_time)
        if state.end_time:
            END_TIME.set(state.end_time)
