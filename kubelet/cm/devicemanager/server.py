"""The Registration service and the plugin clients (devicemanager/plugin/v1beta1
upstream: server.go, handler.go, client.go).

The kubelet serves Registration on <root-dir>/device-plugins/kubelet.sock. A
plugin's Register is checked (API version, an extended resource name), then the
kubelet dials the plugin's endpoint in the same directory and asks its options
before answering, so the plugin learns from Register's error when it will not
be used. ListAndWatch then runs as a stream until it ends; the kubelet never
calls it again on that connection: the plugin has to register again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from typing import Protocol

import grpc

from kubelet import metrics
from kubelet.cm.devicemanager import (
    CHECKPOINT_NAME,
    KUBELET_SOCKET,
    SUPPORTED_VERSIONS,
    is_extended_resource_name,
)
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.api import api_pb2_grpc as pb_grpc
from kubelet.pluginmanager import PluginError
from kubelet.util.grpcopts import OWN_CONNECTIONS

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0


class PluginConnectError(Exception):
    """Dialling a plugin or asking its options failed (the message says why)."""


def rpc_error(err: grpc.RpcError) -> str:
    """An RPC error as grpc-go prints it ("rpc error: code = Unknown desc = ...")."""
    code = err.code() if isinstance(err, grpc.aio.AioRpcError) else None
    name = "".join(p.title() for p in code.name.split("_")) if code is not None else "Unknown"
    details = err.details() if isinstance(err, grpc.aio.AioRpcError) else str(err)
    return f"rpc error: code = {name} desc = {details}"


class ClientHandler(Protocol):
    """The manager's side of a plugin connection (ClientHandler upstream)."""

    async def plugin_connected(self, client: PluginClient) -> None:
        """Raises PluginConnectError when the plugin is not to be used."""

    def plugin_disconnected(self, client: PluginClient) -> None: ...

    def devices_listed(self, client: PluginClient, devices: list[pb.Device]) -> None: ...


class PluginClient:
    """One registered plugin: its channel, its stub, its ListAndWatch stream."""

    def __init__(self, resource: str, socket_path: str) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self._channel: grpc.aio.Channel | None = None
        self.stub: pb_grpc.DevicePluginStub | None = None

    async def connect(self, timeout: float = DIAL_TIMEOUT) -> None:
        # The default authority of a unix target is the path; grpc-go sends
        # "localhost", and some plugins' HTTP/2 servers reject anything else.
        channel = grpc.aio.insecure_channel(
            "unix://" + self.socket_path,
            options=[("grpc.default_authority", "localhost"), OWN_CONNECTIONS],
        )
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout)
        except TimeoutError:
            await channel.close()
            raise PluginConnectError(
                f"failed to dial device plugin: {self.socket_path}: timed out after {timeout}s"
            ) from None
        self._channel = channel
        self.stub = pb_grpc.DevicePluginStub(channel)

    def api(self) -> pb_grpc.DevicePluginStub:
        if self.stub is None:
            raise PluginConnectError(f"device plugin {self.resource} is not connected")
        return self.stub

    async def run(self, handler: ClientHandler) -> None:
        """ListAndWatch until the stream ends; every response replaces the devices."""
        try:
            async for resp in self.api().ListAndWatch(pb.Empty()):
                log.info("State pushed for device plugin %s: %d devices",
                         self.resource, len(resp.devices))  # fmt: skip
                handler.devices_listed(self, list(resp.devices))
        except grpc.aio.AioRpcError as err:
            log.error("ListAndWatch ended unexpectedly for device plugin %s: %s",
                      self.resource, rpc_error(err))  # fmt: skip
            return
        log.error("ListAndWatch ended unexpectedly for device plugin %s: stream closed",
                  self.resource)  # fmt: skip

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def cleanup_plugin_dir(directory: str) -> None:
    """Remove the sockets a previous run left (plugins must register again);
    the checkpoint, directories and other files stay."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name == CHECKPOINT_NAME:
            continue
        try:
            st = os.lstat(path)
        except OSError as err:
            log.error("Failed to stat file %s: %s", path, err)
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        try:
            os.unlink(path)
        except OSError as err:
            log.error("Failed to remove file %s: %s", path, err)


class RegistrationServer(pb_grpc.RegistrationServicer):
    """Registration on kubelet.sock; one client per resource name."""

    def __init__(
        self, socket_dir: str, handler: ClientHandler, dial_timeout: float = DIAL_TIMEOUT
    ) -> None:
        self.socket_dir = socket_dir
        self.handler = handler
        self.dial_timeout = dial_timeout
        self.clients: dict[str, PluginClient] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: grpc.aio.Server | None = None
        self.last_error: str | None = None  # why the server could not start

    @property
    def socket_path(self) -> str:
        return os.path.join(self.socket_dir, KUBELET_SOCKET)

    async def start(self) -> None:
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        try:
            os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
            cleanup_plugin_dir(self.socket_dir)
            server.add_insecure_port("unix://" + self.socket_path)
            await server.start()
        except (OSError, RuntimeError) as err:
            self.last_error = str(err)
            raise
        self._server = server
        self.last_error = None
        log.info("Device plugin registration server serving %s", self.socket_path)

    def healthy(self) -> str | None:
        """The /healthz check "device-plugin": why no plugin can register, or None."""
        if self.last_error is None:
            return None
        return (
            "device registration error: device plugin registration gRPC server failed "
            f"and no device plugins can register: {self.last_error}"
        )

    async def stop(self) -> None:
        # The server stops even when closing a plugin's stream is cancelled
        # (as during the kubelet's shutdown), or it outlives the event loop.
        server, self._server = self._server, None
        try:
            for client in list(self.clients.values()):
                await self._disconnect(client)
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            if server is not None:
                await server.stop(None)

    async def Register(
        self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        resource = request.resource_name
        log.info("Got registration request from device plugin with resource %s", resource)
        metrics.DEVICE_PLUGIN_REGISTRATIONS.labels(resource).inc()
        problem = validate_registration(request)
        if problem is None:
            problem = await self.connect(resource, os.path.join(self.socket_dir, request.endpoint))
        if problem is not None:
            log.error("Bad registration request from device plugin %s: %s", resource, problem)
            await context.abort(grpc.StatusCode.UNKNOWN, problem)
        return pb.Empty()

    async def connect(self, resource: str, socket_path: str) -> str | None:
        """connectClient: dial, ask the options, then watch; the error text or None."""
        client = PluginClient(resource, socket_path)
        try:
            await client.connect(self.dial_timeout)
            await self.handler.plugin_connected(client)
        except PluginConnectError as err:
            await client.close()
            return str(err)
        old = self.clients.get(resource)
        self.clients[resource] = client
        if old is not None:  # re-registered: the old stream's end is no news
            await old.close()
        task = asyncio.ensure_future(self._watch(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

    async def _watch(self, client: PluginClient) -> None:
        await client.run(self.handler)
        if self.clients.get(client.resource) is client:
            await self._disconnect(client)

    async def disconnect(self, resource: str) -> None:
        client = self.clients.get(resource)
        if client is not None:
            await self._disconnect(client)

    async def _disconnect(self, client: PluginClient) -> None:
        if self.clients.get(client.resource) is client:
            del self.clients[client.resource]
        await client.close()
        self.handler.plugin_disconnected(client)
        log.info("Device plugin %s disconnected", client.resource)


def validate_registration(request: pb.RegisterRequest) -> str | None:
    if request.version not in SUPPORTED_VERSIONS:
        return (
            f'requested API version "{request.version}" is not supported by kubelet. '
            f'Supported version is "{list(SUPPORTED_VERSIONS)}"'
        )
    if not is_extended_resource_name(request.resource_name):
        return f'the ResourceName "{request.resource_name}" is invalid'
    endpoint = request.endpoint
    # The endpoint names a socket in the device-plugins dir, nothing else.
    if not endpoint or "/" in endpoint or endpoint in (".", "..") or "\x00" in endpoint:
        return f'the endpoint "{endpoint}" is not a socket name in the device plugin directory'
    return None


class WatcherHandler:
    """Device plugins registering through the plugin watcher
    (<root-dir>/plugins_registry, type DevicePlugin), as upstream's handler.go:
    the same checks and connection as Register on kubelet.sock."""

    def __init__(self, server: RegistrationServer) -> None:
        self.server = server

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        if not any(v in SUPPORTED_VERSIONS for v in versions):
            raise PluginError(
                f"manager version, {SUPPORTED_VERSIONS[0]}, is not among plugin supported "
                f"versions {versions}"
            )
        if not is_extended_resource_name(name):
            raise PluginError(
                f'invalid name of device plugin socket: the ResourceName "{name}" is invalid'
            )

    async def register_plugin(
        self, name: str, endpoint: str, versions: list[str], timeout: float | None
    ) -> None:
        metrics.DEVICE_PLUGIN_REGISTRATIONS.labels(name).inc()
        problem = await self.server.connect(name, endpoint)
        if problem is not None:
            raise PluginError(problem)

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        await self.server.disconnect(name)
