"""DRA driver registration and the gRPC client (cm/dra/plugin upstream).

A driver registers through the plugin watcher (type DRAPlugin) naming the
gRPC services it serves; the kubelet picks the first it supports (v1 or
v1beta1, whose messages are the same on the wire) and keeps one client per
(driver, endpoint). Each client's connection is watched from registration on:
a driver is usable while one of its endpoints is connected, and the newest
connected endpoint is called (else the newest). When a driver has been
unusable for WIPE_DELAY (no registration left, its service stopped, or it
never answered), its ResourceSlices for this node are deleted: they describe
devices nobody serves any more. A connection coming back cancels that. At start the slices of every driver for this node are deleted,
as upstream does, since a driver re-publishes them once it runs.

With ResourceHealthStatus, each endpoint also gets a NodeWatchResources
stream (dra-health v1alpha1), kept open while it is registered and handed to
the health handler (cm/dra/health.py); it is opened again after it ends, and
given up for a driver that answers UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import quote

import grpc
from google.protobuf.message import Message

from kubelet.client.rest import API_ERRORS, APIClient, APIError
from kubelet.cm.dra import metrics as dm
from kubelet.cm.dra.api import api_pb2 as pb
from kubelet.cm.dra.api import health_pb2 as hpb
from kubelet.cm.dra.claims import ClaimError, valid_name
from kubelet.pluginmanager import PluginError
from kubelet.util.grpcopts import OWN_CONNECTIONS

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
SUPPORTED_SERVICES = (V1_SERVICE, V1BETA1_SERVICE)
_METHOD_PREFIX = {
    V1_SERVICE: "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/",
    V1BETA1_SERVICE: "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/",
}
CALL_TIMEOUT = 45.0  # defaultClientCallTimeout
WIPE_DELAY = 30.0  # defaultWipingDelay
_WIPE_BACKOFF = (1.0, 300.0, 100)  # first, cap, steps
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
WATCH_RESOURCES = "/v1alpha1.DRAResourceHealth/NodeWatchResources"
# The wait before a health stream is opened again: upstream's period (5 s),
# doubled after each attempt that got no response, up to the cap.
HEALTH_RETRY = (5.0, 30.0)


class HealthCall(AsyncIterable[hpb.NodeWatchResourcesResponse], Protocol):
    """A NodeWatchResources call (grpc.aio's UnaryStreamCall)."""

    def cancel(self) -> bool: ...


class HealthStreamHandler(Protocol):
    """StreamHandler upstream: consumes a driver's health stream until it ends,
    raising the stream's error (grpc.aio.AioRpcError) if it ended with one."""

    async def handle_stream(
        self, driver: str, responses: AsyncIterable[hpb.NodeWatchResourcesResponse]
    ) -> None: ...

    def stop(self) -> None:
        """The kubelet stops: the streams are about to be cancelled."""


@dataclass
class DRAPlugin:
    """One registered endpoint of a driver."""

    driver: str
    endpoint: str
    service: str
    timeout: float
    channel: grpc.aio.Channel = field(repr=False)
    # The channel is READY; only the manager's connection watcher sets it.
    connected: bool = False

    async def _call(self, method: str, req: Message, answer: type[M]) -> M:
        path = _METHOD_PREFIX[self.service] + method
        call = self.channel.unary_unary(
            path,
            request_serializer=type(req).SerializeToString,
            response_deserializer=answer.FromString,
        )
        start, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            resp: M = await call(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            code = err.code()
            raise
        finally:
            dm.GRPC_OPERATIONS.labels(self.driver, path, dm.code_name(code)).observe(
                time.perf_counter() - start
            )
        return resp

    async def prepare(self, claims: list[pb.Claim]) -> pb.NodePrepareResourcesResponse:
        return await self._call(
            "NodePrepareResources",
            pb.NodePrepareResourcesRequest(claims=claims),
            pb.NodePrepareResourcesResponse,
        )

    async def unprepare(self, claims: list[pb.Claim]) -> pb.NodeUnprepareResourcesResponse:
        return await self._call(
            "NodeUnprepareResources",
            pb.NodeUnprepareResourcesRequest(claims=claims),
            pb.NodeUnprepareResourcesResponse,
        )

    def watch_resources(self) -> HealthCall:
        """NodeWatchResources: a stream without a deadline."""
        call: HealthCall = self.channel.unary_stream(
            WATCH_RESOURCES,
            request_serializer=hpb.NodeWatchResourcesRequest.SerializeToString,
            response_deserializer=hpb.NodeWatchResourcesResponse.FromString,
        )(hpb.NodeWatchResourcesRequest())
        return call


async def _health_attempt(plugin: DRAPlugin, handler: HealthStreamHandler) -> bool | None:
    """One NodeWatchResources stream, handed to handler until it ends: did it
    carry a response (None: the driver does not serve the API)."""
    call = plugin.watch_resources()
    received = False

    async def responses() -> AsyncIterator[hpb.NodeWatchResourcesResponse]:
        nonlocal received
        async for resp in call:
            received = True
            yield resp

    try:
        await handler.handle_stream(plugin.driver, responses())
        log.info("Health stream of DRA driver %s at %s ended", plugin.driver, plugin.endpoint)
    except grpc.aio.AioRpcError as err:
        if err.code() is grpc.StatusCode.UNIMPLEMENTED:
            log.info("DRA driver %s at %s does not serve NodeWatchResources: the health "
                     "of its devices is not watched", plugin.driver, plugin.endpoint)  # fmt: skip
            return None
        log.info("Health stream of DRA driver %s at %s failed: %s", plugin.driver,
                 plugin.endpoint, err.details() or err.code().name)  # fmt: skip
    finally:
        call.cancel()
    return received


def choose_service(driver: str, endpoint: str, services: list[str]) -> str:
    """validateSupportedServices, with upstream's messages."""
    where = f"invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}"
    if not services:
        raise PluginError(
            f"{where}: empty list of supported gRPC services (aka supported versions)"
        )
    for s in services:
        if s in SUPPORTED_SERVICES:
            return s
    raise PluginError(
        f"{where}: none of services supported by the plugin ({services}) are supported by "
        f"the kubelet ({list(SUPPORTED_SERVICES)})"
    )


class DRAPluginManager:
    """The plugin watcher's handler for DRAPlugin, and the drivers' clients."""

    def __init__(
        self,
        client: APIClient | None,
        node_name: str,
        wipe_delay: float = WIPE_DELAY,
        wipe_backoff: tuple[float, float, int] = _WIPE_BACKOFF,
        health_retry: tuple[float, float] = HEALTH_RETRY,
        health: HealthStreamHandler | None = None,
    ) -> None:
        """health (ResourceHealthStatus): a NodeWatchResources stream is kept
        open on each endpoint that registers, handed to it."""
        self.client = client
        self.node_name = node_name
        self.wipe_delay = wipe_delay
        self.wipe_backoff = wipe_backoff
        self.health_retry = health_retry
        self.health = health
        # (driver, endpoint) -> the task keeping its health stream open
        self._health: dict[tuple[str, str], asyncio.Task[None]] = {}
        # driver -> its endpoints in the order they registered
        self.store: dict[str, list[DRAPlugin]] = {}
        # (driver, endpoint) -> the task following that channel's state
        self._watchers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # driver -> its pending slice wipe
        self._wipes: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------- PluginHandler
    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        if not valid_name(name):
            raise PluginError(f"invalid DRA driver name {name!r}: not a DNS subdomain")
        if not os.path.isabs(endpoint):
            raise PluginError(f"DRA driver {name}: endpoint {endpoint!r} is not an absolute path")
        choose_service(name, endpoint, versions)

    async def register_plugin(
        self, name: str, endpoint: str, versions: list[str], timeout: float | None
    ) -> None:
        self.validate_plugin(name, endpoint, versions)
        service = choose_service(name, endpoint, versions)
        plugins = self.store.setdefault(name, [])
        if any(p.endpoint == endpoint for p in plugins):
            raise PluginError(
                f"endpoint {endpoint} already registered for DRA driver plugin {name}"
            )
        channel = grpc.aio.insecure_channel(f"unix://{endpoint}", options=[OWN_CONNECTIONS])
        plugin = DRAPlugin(name, endpoint, service, timeout or CALL_TIMEOUT, channel)
        plugins.append(plugin)
        # Connect now, not at the first call: a driver that never answers is
        # found out (and its slices wiped) without a pod needing it.
        self._watchers[(name, endpoint)] = asyncio.ensure_future(self._watch(plugin))
        if self.health is not None:
            task = asyncio.ensure_future(self._health_stream(plugin, self.health))
            self._health[(name, endpoint)] = task
        log.info("Registered DRA plugin %s at %s (service %s, %d endpoints)",
                 name, endpoint, service, len(plugins))  # fmt: skip
        self._sync(name)

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        plugins = self.store.get(name, [])
        gone = [p for p in plugins if p.endpoint == endpoint]
        if not gone:
            return
        self.store[name] = [p for p in plugins if p.endpoint != endpoint]
        if not self.store[name]:
            del self.store[name]
        tasks = [
            self._watchers.pop((name, endpoint), None),
            self._health.pop((name, endpoint), None),
        ]
        for task in tasks:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        log.info("Unregistered DRA plugin %s at %s (%d endpoints left)",
                 name, endpoint, len(self.store.get(name, [])))  # fmt: skip
        self._sync(name)
        for p in gone:
            await p.channel.close()

    # ---------------------------------------------------------- connection
    async def _watch(self, plugin: DRAPlugin) -> None:
        """Follow the channel's state until it is closed: READY is connected,
        leaving READY is a lost connection. An idle channel (after a drop, or
        gRPC's idle timeout) is asked to connect again, so a driver that comes
        back is found without waiting for a call; gRPC's reconnect back-off
        paces the attempts."""
        ch = plugin.channel
        state = ch.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.SHUTDOWN:
            self._set_connected(plugin, state is grpc.ChannelConnectivity.READY)
            await ch.wait_for_state_change(state)
            state = ch.get_state(try_to_connect=True)

    async def _health_stream(self, plugin: DRAPlugin, handler: HealthStreamHandler) -> None:
        """Until the endpoint goes (this task is cancelled): open the stream, let
        the handler consume it, wait, again. A driver without the service
        (UNIMPLEMENTED) is said once and not asked again."""
        first, cap = self.health_retry
        wait = first
        while True:
            received = await _health_attempt(plugin, handler)
            if received is None:
                return
            if received:
                wait = first
            await asyncio.sleep(wait)
            wait = min(wait * 2, cap)

    def _set_connected(self, plugin: DRAPlugin, connected: bool) -> None:
        if plugin.connected == connected:
            return
        plugin.connected = connected
        log.info("DRA plugin %s at %s: %s", plugin.driver, plugin.endpoint,
                 "connected" if connected else "connection lost")  # fmt: skip
        self._sync(plugin.driver)

    def usable(self, driver: str) -> bool:
        """One of the driver's endpoints is connected."""
        return any(p.connected for p in self.store.get(driver, ()))

    def _sync(self, driver: str) -> None:
        """After any change of the driver's endpoints: a usable driver keeps its
        slices; an unusable one has them wiped after wipe_delay, counted from
        the first change that left it unusable (a later one does not restart a
        pending wipe's clock; after the wipe, the next change starts another)."""
        if self.client is None:
            return  # standalone: no slices to wipe
        if self.usable(driver):
            wipe = self._wipes.pop(driver, None)
            if wipe is not None:
                wipe.cancel()
                log.info("DRA driver %s is usable again: its ResourceSlices stay", driver)
            return
        if driver not in self._wipes:
            self._wipes[driver] = asyncio.ensure_future(self._wipe_later(driver))

    # ------------------------------------------------------------- clients
    def get(self, driver: str) -> DRAPlugin:
        """GetPlugin: the newest connected endpoint of the driver, else its
        newest (a call then fails with gRPC's UNAVAILABLE and is retried)."""
        if not driver:
            raise ClaimError("DRA driver name is empty")
        plugins = self.store.get(driver)
        if not plugins:
            raise ClaimError(f"DRA driver {driver} is not registered")
        for p in reversed(plugins):
            if p.connected:
                return p
        return plugins[-1]

    # ----------------------------------------------------- ResourceSlices
    async def _wipe_later(self, driver: str) -> None:
        try:
            await asyncio.sleep(self.wipe_delay)
            log.info("DRA driver %s unusable for %ss: deleting its ResourceSlices on this node",
                     driver, self.wipe_delay)  # fmt: skip
            await self.wipe_slices(driver)
        finally:
            if self._wipes.get(driver) is asyncio.current_task():
                del self._wipes[driver]

    async def wipe_slices(self, driver: str = "") -> bool:
        """Delete this node's ResourceSlices (of one driver, or all), retried
        with upstream's back-off; True once the API server took it."""
        if self.client is None:
            return False
        selector = f"spec.nodeName={self.node_name}"
        if driver:
            selector += f",spec.driver={driver}"
        path = f"{SLICES_PATH}?fieldSelector={quote(selector, safe='=,')}"
        delay, cap, steps = self.wipe_backoff
        for _ in range(steps):
            try:
                await self.client.delete(path)
                log.info("Deleted ResourceSlices (%s)", selector)
                return True
            except APIError as err:
                if err.not_found:
                    return True
                log.info("Deleting ResourceSlices (%s) failed, retrying: %s", selector, err)
            except API_ERRORS as err:
                log.info("Deleting ResourceSlices (%s) failed, retrying: %s", selector, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, cap)
        return False

    async def close(self) -> None:
        if self.health is not None:
            self.health.stop()
        tasks = [*self._wipes.values(), *self._watchers.values(), *self._health.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wipes.clear()
        self._watchers.clear()
        self._health.clear()
        for plugins in self.store.values():
            for p in plugins:
                await p.channel.close()
