"""The pod-resources gRPC server (ListenAndServePodResources upstream): v1 and
v1alpha1 on <root-dir>/pod-resources/kubelet.sock, every call through one
token bucket (apis/grpc/ratelimit.go: 100 per second, bursts of 10; over it the
call fails with ResourceExhausted "rejected by rate limit").

The socket is bound under a temporary name in the directory and renamed into
place, as upstream's CreateListener does, so a client never finds a path that
does not answer; it is removed when the server stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable

import grpc

from kubelet.apis.podresources import (
    DEFAULT_BURST_TOKENS,
    DEFAULT_QPS,
    POD_RESOURCES_DIR,
    SOCKET_NAME,
)
from kubelet.apis.podresources.server_v1 import Gates, ResourceReader, V1Server
from kubelet.apis.podresources.server_v1alpha1 import V1Alpha1Server
from kubelet.apis.podresources.types import Providers
from kubelet.apis.podresources.v1 import api_pb2_grpc as v1_grpc
from kubelet.apis.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc

log = logging.getLogger(__name__)

RATE_LIMITED = "rejected by rate limit"


class TokenBucket:
    """golang.org/x/time/rate's Limiter.Allow: starts full, refills at qps per second."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.last = clock()

    def allow(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


async def _rejected(request: bytes, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)


_REJECT = grpc.unary_unary_rpc_method_handler(_rejected)


# grpc ships no type stubs: its base class is Any to mypy.
class RateLimitInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc has no stubs: the base is Any
    """Every known method costs a token; an unknown one is left to gRPC
    (Unimplemented), as grpc-go runs no interceptor for it."""

    def __init__(self, limiter: TokenBucket) -> None:
        self.limiter = limiter

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or self.limiter.allow():
            return handler
        return _REJECT


def socket_path(root_dir: str) -> str:
    """Built from the root dir and constants only."""
    return os.path.join(root_dir, POD_RESOURCES_DIR, SOCKET_NAME)


class PodResourcesServer:
    def __init__(
        self, root_dir: str, providers: Providers, gates: Gates, limiter: TokenBucket | None = None
    ) -> None:
        self.path = socket_path(root_dir)
        self.providers = providers
        self.gates = gates
        self.limiter = limiter or TokenBucket(DEFAULT_QPS, DEFAULT_BURST_TOKENS)
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Raises OSError or RuntimeError when the socket cannot be served."""
        log.info("Setting rate limiting for endpoint podresources: qps %d, burst tokens %d",
                 self.limiter.qps, self.limiter.burst)  # fmt: skip
        if self.gates.dynamic_resources and self.providers.dynamic is None:
            log.warning("KubeletPodResourcesDynamicResources is on but DynamicResourceAllocation "
                        "is off: pod-resources answers report no dynamic_resources")  # fmt: skip
        server = grpc.aio.server(interceptors=[RateLimitInterceptor(self.limiter)])
        v1alpha1_grpc.add_PodResourcesListerServicer_to_server(
            V1Alpha1Server(self.providers), server
        )
        v1_grpc.add_PodResourcesListerServicer_to_server(
            V1Server(ResourceReader(self.providers, self.gates)), server
        )
        directory = os.path.dirname(self.path)
        _unlink(self.path)
        os.makedirs(directory, mode=0o750, exist_ok=True)
        temp = _unused_name(directory)
        if server.add_insecure_port("unix://" + temp) == 0:
            raise RuntimeError(f"failed to listen on {temp}")
        await server.start()
        try:
            os.rename(temp, self.path)
        except OSError:
            await server.stop(None)
            _unlink(temp)
            raise
        self._server = server
        log.info("Starting to serve the podresources API on %s (list uses active pods: %s)",
                 self.path, self.gates.list_active_pods)  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until stop. A socket that cannot be served is logged as an error
        (upstream exits; here every pod keeps being served without this API)."""
        try:
            await self.start()
        except (OSError, RuntimeError) as err:
            log.error("Failed to serve the podresources API on %s: %s", self.path, err)
            return
        try:
            await stop.wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        """The socket goes first (no await before it: the kubelet's shutdown
        cancels this task, possibly while it is already stopping); the server's
        stop is shielded so a cancel cannot leave it half done."""
        server, self._server = self._server, None
        if server is None:
            return
        _unlink(self.path)
        await asyncio.shield(server.stop(None))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unused_name(directory: str) -> str:
    """A fresh path in directory (made and removed at once, as upstream's CreateTemp)."""
    fd, path = tempfile.mkstemp(dir=directory)
    os.close(fd)
    os.unlink(path)
    return path
