"""A DRA driver's node side speaking the real protocol over Unix sockets, for
tests of the DRA manager (as the e2e test-driver's kubelet plugin): the
Registration service on a socket in the plugin registry, the DRAPlugin
service (v1, or v1beta1 under its own name) on its endpoint, CDI device IDs
per prepared claim, errors injected per method, and the calls made. With
health=True it also serves DRAResourceHealth: each NodeWatchResources stream
sends what send_health is given until end_health ends it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from kubelet.cm.dra.api import api_pb2 as pb
from kubelet.cm.dra.api import health_pb2 as hpb
from kubelet.pluginmanager import DRA_PLUGIN
from kubelet.pluginmanager.api import registration_pb2 as reg
from kubelet.pluginmanager.api import registration_pb2_grpc as reg_grpc

ErrorInjector = Callable[[str, str], str | None]  # (method, claim name) -> error


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, info: reg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[tuple[bool, str]] = []

    async def GetInfo(self, request: Any, context: Any) -> reg.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


class FakeDRAPlugin:
    """devices: claim name -> [(request names, CDI IDs)] prepared for it."""

    def __init__(
        self,
        driver: str,
        devices: dict[str, list[tuple[list[str], list[str]]]],
        services: tuple[str, ...] = ("v1.DRAPlugin",),
        fail: ErrorInjector = lambda method, claim: None,
        package: str = "v1",
        health: bool = False,
    ) -> None:
        self.driver = driver
        self.devices = devices
        self.services = services
        self.fail = fail
        self.package = package  # the gRPC service it serves: v1 or v1beta1
        self.prepared: list[list[str]] = []  # claim names per NodePrepareResources
        self.unprepared: list[list[str]] = []
        self.registration: _Registration | None = None
        self.reg_socket = ""
        self.endpoint = ""
        self._servers: list[grpc.aio.Server] = []
        self._service: grpc.aio.Server | None = None
        self.health = health
        self.health_calls = 0  # NodeWatchResources calls received
        self.health_streams: list[asyncio.Queue[object]] = []  # the open ones

    async def _watch(self, req: hpb.NodeWatchResourcesRequest, ctx: Any) -> AsyncIterator[Any]:
        self.health_calls += 1
        q: asyncio.Queue[object] = asyncio.Queue()
        self.health_streams.append(q)
        try:
            while True:
                # A response, or how the stream ends (StatusCode.OK: cleanly).
                event = await q.get()
                if isinstance(event, hpb.NodeWatchResourcesResponse):
                    yield event
                    continue
                if event is not grpc.StatusCode.OK:
                    await ctx.abort(event, "injected by the test")
                return
        finally:
            self.health_streams.remove(q)

    def send_health(self, devices: list[tuple[str, str, hpb.HealthStatus]]) -> None:
        """(pool, device, health) to every open health stream."""
        resp = hpb.NodeWatchResourcesResponse(devices=[
            hpb.DeviceHealth(device=hpb.DeviceIdentifier(pool_name=p, device_name=d),
                             health=h, last_updated_time=1)
            for p, d, h in devices
        ])  # fmt: skip
        for q in self.health_streams:
            q.put_nowait(resp)

    def end_health(self, code: Any = grpc.StatusCode.OK) -> None:
        """End every open health stream, cleanly or with an error."""
        for q in self.health_streams:
            q.put_nowait(code)

    def _health_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "v1alpha1.DRAResourceHealth",
            {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                    self._watch,
                    request_deserializer=hpb.NodeWatchResourcesRequest.FromString,
                    response_serializer=hpb.NodeWatchResourcesResponse.SerializeToString,
                )
            },
        )

    async def _prepare(self, req: pb.NodePrepareResourcesRequest, ctx: Any) -> Any:
        self.prepared.append([c.name for c in req.claims])
        out = pb.NodePrepareResourcesResponse()
        for c in req.claims:
            err = self.fail("NodePrepareResources", c.name)
            if err:
                out.claims[c.uid].error = err
                continue
            for i, (requests, cdi) in enumerate(self.devices.get(c.name, [])):
                out.claims[c.uid].devices.append(pb.Device(
                    request_names=requests, pool_name="pool", device_name=f"{c.name}-{i}",
                    cdi_device_ids=cdi,
                ))  # fmt: skip
            out.claims[c.uid].SetInParent()
        return out

    async def _unprepare(self, req: pb.NodeUnprepareResourcesRequest, ctx: Any) -> Any:
        self.unprepared.append([c.name for c in req.claims])
        out = pb.NodeUnprepareResourcesResponse()
        for c in req.claims:
            out.claims[c.uid].error = self.fail("NodeUnprepareResources", c.name) or ""
        return out

    def _handler(self) -> grpc.GenericRpcHandler:
        def unary(fn: Any, req: Any, resp: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        return grpc.method_handlers_generic_handler(
            f"k8s.io.kubelet.pkg.apis.dra.{self.package}.DRAPlugin",
            {
                "NodePrepareResources": unary(
                    self._prepare, pb.NodePrepareResourcesRequest, pb.NodePrepareResourcesResponse
                ),
                "NodeUnprepareResources": unary(
                    self._unprepare,
                    pb.NodeUnprepareResourcesRequest,
                    pb.NodeUnprepareResourcesResponse,
                ),
            },
        )

    async def start_service(self) -> None:
        """Serve the DRAPlugin service at the endpoint (again, after
        stop_service: a driver restarting while its registration stays)."""
        drv = grpc.aio.server()
        drv.add_generic_rpc_handlers((self._handler(),))
        if self.health:
            drv.add_generic_rpc_handlers((self._health_handler(),))
        drv.add_insecure_port(f"unix://{self.endpoint}")
        await drv.start()
        self._service = drv

    async def stop_service(self) -> None:
        """Stop serving DRAPlugin, closing its connections; the registration
        socket stays."""
        if self._service is not None:
            await self._service.stop(None)
            self._service = None

    async def start(self, registry_dir: str, endpoint: str) -> FakeDRAPlugin:
        """Serve the driver at endpoint, then announce it in the registry."""
        self.endpoint = endpoint
        await self.start_service()
        self.registration = _Registration(reg.PluginInfo(
            type=DRA_PLUGIN, name=self.driver, endpoint=endpoint,
            supported_versions=list(self.services),
        ))  # fmt: skip
        srv = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self.registration, srv)
        os.makedirs(registry_dir, exist_ok=True)
        self.reg_socket = os.path.join(registry_dir, self.driver + "-reg.sock")
        srv.add_insecure_port(f"unix://{self.reg_socket}")
        await srv.start()
        self._servers.append(srv)
        return self

    async def stop(self) -> None:
        await self.stop_service()
        for s in self._servers:
            await s.stop(None)
        self._servers.clear()
