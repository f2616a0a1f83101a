"""The plugin manager (plugin_manager.go, reconciler and operation executor
upstream): the watcher fills the desired state (socket path -> incarnation),
the reconciler brings the registered plugins to it, deregistering before
registering, one operation per socket at a time, each failing socket retried
with upstream's exponential back-off (500 ms doubling up to 2 min 2 s).

Event driven: the reconciler runs when the watcher reports a change, an
operation ends, or a back-off expires, never on a fixed tick.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Coroutine
from typing import Any, NoReturn

import grpc

from kubelet.pluginmanager import REGISTRY_DIR_NAME, PluginError, PluginHandler, RegisteredPlugin
from kubelet.pluginmanager.api import registration_pb2 as pb
from kubelet.pluginmanager.api import registration_pb2_grpc as pb_grpc
from kubelet.pluginmanager.watcher import PluginWatcher
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.util.grpcopts import OWN_CONNECTIONS

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0
INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 122.0


class RegistrationFailed(Exception):
    """Registering the plugin at a socket failed (the message says why)."""


def registry_dir(root_dir: str) -> str:
    return os.path.join(root_dir, REGISTRY_DIR_NAME)


class PluginManager:
    def __init__(
        self,
        sock_dir: str,
        clock: Clock = REAL_CLOCK,
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        self.sock_dir = sock_dir
        self.clock = clock
        self.dial_timeout = dial_timeout
        self.handlers: dict[str, PluginHandler] = {}
        self.desired: dict[str, int] = {}  # socket path -> incarnation
        self.actual: dict[str, RegisteredPlugin] = {}
        self._generations = itertools.count(1)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._backoff: dict[str, tuple[float, float]] = {}  # path -> (until, duration)
        self._wake = asyncio.Event()
        self.watcher = PluginWatcher(sock_dir, self._socket_added, self._socket_removed)

    def add_handler(self, plugin_type: str, handler: PluginHandler) -> None:
        """Register the consumer of one plugin type (before run())."""
        self.handlers[plugin_type] = handler

    def registered(self) -> list[RegisteredPlugin]:
        return sorted(self.actual.values(), key=lambda p: p.socket_path)

    # --------------------------------------------------------------- watcher

    def _socket_added(self, path: str) -> None:
        log.info("Plugin socket %s found", path)
        self.desired[path] = next(self._generations)
        self._backoff.pop(path, None)
        self._wake.set()

    def _socket_removed(self, path: str) -> None:
        log.info("Plugin socket %s removed", path)
        self.desired.pop(path, None)
        self._backoff.pop(path, None)
        self._wake.set()

    # ------------------------------------------------------------ reconciler

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self.watcher.start(loop)
        log.info("Plugin manager watching %s", self.sock_dir)
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()
                timeout = self.reconcile()
                waker = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait(
                    {waker, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                waker.cancel()
        finally:
            stopper.cancel()
            self.watcher.stop(loop)
            tasks = list(self._running.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def reconcile(self) -> float | None:
        """Start what is due; returns seconds until the next back-off expiry."""
        now = self.clock.monotonic()
        for path, plugin in list(self.actual.items()):
            if self.desired.get(path) != plugin.generation and path not in self._running:
                self._start(path, self._unregister(plugin))
        next_at: float | None = None
        for path, gen in self.desired.items():
            have = self.actual.get(path)
            if (have is not None and have.generation == gen) or path in self._running:
                continue
            until = self._backoff.get(path, (0.0, 0.0))[0]
            if until > now:
                next_at = until if next_at is None else min(next_at, until)
                continue
            self._start(path, self._register(path, gen))
        return None if next_at is None else max(0.0, next_at - now)

    def _start(self, path: str, coro: Coroutine[Any, Any, None]) -> None:
        self._running[path] = asyncio.ensure_future(self._run_op(path, coro))

    async def _run_op(self, path: str, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as err:  # any handler failure: logged, retried with back-off
            prev = self._backoff.get(path)
            duration = INITIAL_BACKOFF if prev is None else min(prev[1] * 2, MAX_BACKOFF)
            self._backoff[path] = (self.clock.monotonic() + duration, duration)
            log.error("Plugin registration at %s failed (retry in %.1fs): %s", path, duration, err)
        else:
            self._backoff.pop(path, None)
        finally:
            self._running.pop(path, None)
            self._wake.set()

    # ------------------------------------------------------------ operations

    async def _register(self, path: str, gen: int) -> None:
        channel = grpc.aio.insecure_channel(f"unix://{path}", options=[OWN_CONNECTIONS])
        try:
            try:
                await asyncio.wait_for(channel.channel_ready(), self.dial_timeout)
            except TimeoutError as err:
                raise RegistrationFailed(f"dial failed at socket {path}: timed out") from err
            stub = pb_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(pb.InfoRequest(), timeout=INFO_TIMEOUT)
            except grpc.aio.AioRpcError as err:
                raise RegistrationFailed(
                    f"failed to get plugin info using RPC GetInfo at socket {path}: {err.details()}"
                ) from err
            await self._register_info(stub, path, gen, info)
        finally:
            await channel.close()

    async def _register_info(
        self, stub: pb_grpc.RegistrationStub, path: str, gen: int, info: pb.PluginInfo
    ) -> None:
        handler = self.handlers.get(info.type)
        if handler is None:
            await self._refuse(
                stub, f"no handler registered for plugin type: {info.type} at socket {path}"
            )
        endpoint = info.endpoint or path
        versions = list(info.supported_versions)
        try:
            handler.validate_plugin(info.name, endpoint, versions)
        except PluginError as err:
            await self._refuse(stub, f"plugin validation failed with err: {err}")
        # In the actual state before register_plugin runs, so a socket removed
        # meanwhile is deregistered once it returns.
        plugin = RegisteredPlugin(path, gen, info.type, info.name, endpoint)
        self.actual[path] = plugin
        try:
            await handler.register_plugin(info.name, endpoint, versions, None)
        except Exception as err:  # any error refuses the plugin (PluginHandler's contract)
            if self.actual.get(path) is plugin:
                del self.actual[path]
            await self._refuse(stub, f"plugin registration failed with err: {err}")
        log.info("Registered %s %s at %s (endpoint %s)", info.type, info.name, path, endpoint)
        try:
            await stub.NotifyRegistrationStatus(
                pb.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT
            )
        except grpc.aio.AioRpcError as err:
            log.warning("Could not tell plugin %s it is registered: %s", info.name, err.details())

    async def _refuse(self, stub: pb_grpc.RegistrationStub, message: str) -> NoReturn:
        """Tell the plugin why it was refused, then fail the operation."""
        message = "RegisterPlugin error -- " + message
        try:
            await stub.NotifyRegistrationStatus(
                pb.RegistrationStatus(plugin_registered=False, error=message),
                timeout=NOTIFY_TIMEOUT,
            )
        except grpc.aio.AioRpcError as err:
            message += f" (and telling the plugin failed: {err.details()})"
        raise RegistrationFailed(message)

    async def _unregister(self, plugin: RegisteredPlugin) -> None:
        if self.actual.get(plugin.socket_path) is plugin:
            del self.actual[plugin.socket_path]
        handler = self.handlers.get(plugin.plugin_type)
        if handler is None:
            return
        log.info("Deregistering %s %s (socket %s)", plugin.plugin_type, plugin.name,
                 plugin.socket_path)  # fmt: skip
        await handler.deregister_plugin(plugin.name, plugin.endpoint)


__all__ = ["PluginError", "PluginManager", "RegistrationFailed", "registry_dir"]
