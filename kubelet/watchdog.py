"""The systemd watchdog (pkg/kubelet/watchdog): WATCHDOG=1 while the kubelet is healthy.

With SystemdWatchdog on (beta, default on in v1.34) and WatchdogSec= set on the
unit, the kubelet pings every WATCHDOG_USEC/2 after its health checks pass
(ping and log always pass; the sync loop's check fails when the loop has not
run for its threshold). A failed check skips that ping, so a wedged sync loop,
or an event loop that stops running this task, lets the manager restart the
kubelet. A timeout of 1 s or less is refused at start-up, as upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kubelet.util import sdnotify

log = logging.getLogger(__name__)

HealthCheck = Callable[[], str | None]
MINIMAL_NOTIFY_INTERVAL = 1.0
# Upstream retries a failed notify twice, 1 s then 2 s apart.
RETRY_DELAYS = (1.0, 2.0)


class WatchdogError(Exception):
    """The watchdog is configured for this process but cannot work."""


class HealthChecker:
    def __init__(
        self,
        checks: Callable[[], Mapping[str, HealthCheck]],
        timeout: float,
        notify: Callable[[str], bool] = sdnotify.notify,
    ) -> None:
        """`timeout` is the manager's watchdog timeout (0: none, nothing runs);
        `checks` gives the current checks (none until the sync loop exists)."""
        if 0 < timeout <= MINIMAL_NOTIFY_INTERVAL:
            raise WatchdogError(f"configure watchdog timeout too small: {timeout}s")
        self.checks = checks
        self.interval = timeout / 2
        self.notify = notify

    @classmethod
    def from_environment(cls, checks: Callable[[], Mapping[str, HealthCheck]]) -> HealthChecker:
        try:
            timeout = sdnotify.watchdog_interval()
        except ValueError as err:
            raise WatchdogError(f"configure watchdog: {err}") from err
        return cls(checks, timeout)

    def failing(self) -> str | None:
        for name, check in self.checks().items():
            try:
                reason = check()
            except Exception as err:  # a broken check is a failed check: the others still run
                reason = f"check raised {err!r}"
            if reason is not None:
                return f"checker {name} failed: {reason}"
        return None

    async def ping(self) -> None:
        """One round: check, then notify with upstream's retries."""
        reason = self.failing()
        if reason is not None:
            log.error(
                "Not notifying the systemd watchdog this time, the kubelet is not healthy: %s",
                reason,
            )
            return
        for delay in (*RETRY_DELAYS, None):
            try:
                if not self.notify("WATCHDOG=1"):
                    log.error("Failed to notify the systemd watchdog: NOTIFY_SOCKET is unset")
                return
            except OSError as err:
                if delay is None:
                    log.error("Failed to notify the systemd watchdog: %s", err)
                    return
                log.debug("Failed to notify the systemd watchdog, retrying: %s", err)
                await asyncio.sleep(delay)

    async def run(self, stop: asyncio.Event) -> None:
        if self.interval <= 0:
            log.info("Systemd watchdog is not enabled")
            return
        log.info("Starting systemd watchdog with interval %.3gs", self.interval)
        while not stop.is_set():
            await self.ping()
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                pass
