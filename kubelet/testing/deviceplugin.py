"""A device plugin speaking the real v1beta1 protocol over a Unix socket, for
tests of the device manager (the plugin side, as the node e2e suite's
testdeviceplugin is): devices it lists and changes, errors injected per
method, and the calls the kubelet made."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable

import grpc

from kubelet.cm.devicemanager import API_VERSION, HEALTHY, KUBELET_SOCKET
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.api import api_pb2_grpc as pb_grpc

ErrorInjector = Callable[[str], str | None]


class FakeDevicePlugin(pb_grpc.DevicePluginServicer):
    def __init__(
        self,
        devices: dict[str, str],
        fail: ErrorInjector = lambda method: None,
        options: pb.DevicePluginOptions | None = None,
        preferred: list[str] | None = None,
        numa: dict[str, list[int]] | None = None,
    ) -> None:
        self.devices = dict(devices)  # ID -> health
        self.numa = numa or {}  # ID -> NUMA nodes (listed with a topology)
        self.fail = fail
        self.options = options or pb.DevicePluginOptions()
        self.preferred = preferred or []
        self.calls: list[str] = []
        self.allocations: list[list[str]] = []
        self.prestarts: list[list[str]] = []
        self._updates: asyncio.Queue[None] = asyncio.Queue()
        self.server: grpc.aio.Server | None = None

    def _list(self) -> pb.ListAndWatchResponse:
        return pb.ListAndWatchResponse(
            devices=[pb.Device(ID=i, health=h, topology=self._topology(i))
                     for i, h in self.devices.items()]
        )  # fmt: skip

    def _topology(self, device_id: str) -> pb.TopologyInfo | None:
        nodes = self.numa.get(device_id)
        return pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]) if nodes else None

    async def _check(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.calls.append(method)
        err = self.fail(method)
        if err is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, err)

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        await self._check("GetDevicePluginOptions", context)
        return self.options

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        await self._check("ListAndWatch", context)
        yield self._list()
        while True:
            await self._updates.get()
            err = self.fail("ListAndWatch")
            if err is not None:
                await context.abort(grpc.StatusCode.UNKNOWN, err)
            yield self._list()

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        await self._check("GetPreferredAllocation", context)
        out = []
        for req in request.container_requests:
            ids = [d for d in self.preferred if d in req.available_deviceIDs]
            out.append(
                pb.ContainerPreferredAllocationResponse(deviceIDs=ids[: req.allocation_size])
            )
        return pb.PreferredAllocationResponse(container_responses=out)

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        await self._check("Allocate", context)
        out = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self.allocations.append(ids)
            out.append(
                pb.ContainerAllocateResponse(
                    envs={"DEVICES": ",".join(ids)},
                    mounts=[
                        pb.Mount(
                            container_path=f"/dev-data/{i}",
                            host_path=f"/tmp/dev-{i}",
                            read_only=True,
                        )
                        for i in ids
                    ],
                    devices=[
                        pb.DeviceSpec(
                            container_path=f"/dev/fake{i}", host_path="/dev/null", permissions="rw"
                        )
                        for i in ids
                    ],
                    annotations={"fake.example.com/devices": ",".join(ids)},
                    cdi_devices=[pb.CDIDevice(name=f"fake.example.com/dev={i}") for i in ids],
                )
            )
        return pb.AllocateResponse(container_responses=out)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreStartContainerResponse:
        await self._check("PreStartContainer", context)
        self.prestarts.append(list(request.devices_ids))
        return pb.PreStartContainerResponse()

    def update(self, devices: dict[str, str]) -> None:
        """Change the devices; ListAndWatch sends the new list."""
        self.devices = dict(devices)
        self._updates.put_nowait(None)

    async def serve(self, socket_dir: str, endpoint: str) -> None:
        self.server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self, self.server)
        self.server.add_insecure_port("unix://" + os.path.join(socket_dir, endpoint))
        await self.server.start()

    async def register(self, socket_dir: str, endpoint: str, resource: str) -> None:
        """Serve on endpoint and Register with the kubelet; raises the kubelet's
        grpc.aio.AioRpcError when it refuses."""
        await self.serve(socket_dir, endpoint)
        async with grpc.aio.insecure_channel(
            "unix://" + os.path.join(socket_dir, KUBELET_SOCKET)
        ) as ch:
            await pb_grpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(
                    version=API_VERSION, endpoint=endpoint, resource_name=resource,
                    options=self.options,
                ),
                timeout=30,
            )  # fmt: skip

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
            self.server = None


__all__ = ["HEALTHY", "FakeDevicePlugin"]
