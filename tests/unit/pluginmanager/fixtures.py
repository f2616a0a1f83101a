"""A plugin's side of the kubelet's plugin registration: the Registration
service a plugin serves on its socket in the registry dir."""

from __future__ import annotations

from typing import Any

import grpc

from kubelet.pluginmanager.api import registration_pb2 as pb
from kubelet.pluginmanager.api import registration_pb2_grpc as pb_grpc


class FakePlugin(pb_grpc.RegistrationServicer):
    """A plugin's registration service; records what the kubelet told it."""

    def __init__(self, ptype: str, name: str, endpoint: str = "", versions=("1.0.0",)) -> None:
        self.info = pb.PluginInfo(
            type=ptype, name=name, endpoint=endpoint, supported_versions=list(versions)
        )
        self.statuses: list[tuple[bool, str]] = []
        self.server: grpc.aio.Server | None = None

    async def GetInfo(self, request: Any, context: Any) -> pb.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        return pb.RegistrationStatusResponse()

    async def start(self, path: str) -> FakePlugin:
        self.server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{path}")
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
