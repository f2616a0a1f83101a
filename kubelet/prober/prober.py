"""One probe attempt (pkg/kubelet/prober/prober.go): exec through CRI ExecSync,
HTTP GET, TCP connect, or gRPC health check, each bounded by timeoutSeconds."""

from __future__ import annotations

import asyncio
import enum
import logging
import socket

import aiohttp
import grpc
import yarl

from kubelet.cri import errors
from kubelet.cri.types import RuntimeService
from kubelet.probe.dial import ip_family, join_host_port, probe_socket
from kubelet.probe.http import HTTPGetter, RedirectError
from kubelet.types import Container, HTTPGetAction, IntOrString, Pod, Probe

log = logging.getLogger(__name__)


class Result(enum.Enum):
    SUCCESS = "Success"
    # Counts as a success, with a ProbeWarning event (an HTTP probe that stopped
    # at a redirect to another host).
    WARNING = "Warning"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


# A health reply is a few bytes: a probe target cannot make the kubelet take more.
_GRPC_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),  # a connection of its own, none shared
    ("grpc.max_receive_message_length", 64 * 1024),
    ("grpc.primary_user_agent", "kube-probe/1.34"),
    ("grpc.enable_retries", 0),
)


def _port(container: Container, port: IntOrString | None) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"unknown port name {port!r}")


class Prober:
    """Runs one probe attempt. Nothing here is shared in a way one pod can use
    up (kubelet/probe): every HTTP, TCP and gRPC probe dials a connection of
    its own, bounded by its own timeoutSeconds from connect to the last byte."""

    def __init__(self, runtime: RuntimeService, getter: HTTPGetter | None = None) -> None:
        self.runtime = runtime
        self.http = getter or HTTPGetter()

    async def close(self) -> None:
        await self.http.close()

    async def probe(
        self, pod: Pod, container: Container, container_id: str, spec: Probe
    ) -> tuple[Result, str]:
        timeout = float(spec.get("timeoutSeconds") or 1)
        pod_ip = (pod.get("status") or {}).get("podIP") or ""
        owner = pod["metadata"].get("uid", "")  # lookups are per pod
        try:
            if "exec" in spec:
                return await self._exec(container_id, spec["exec"].get("command") or [], timeout)
            if "httpGet" in spec:
                url, headers = http_request(container, spec["httpGet"], pod_ip)
                return await self._http_get(owner, url, headers, timeout)
            if "tcpSocket" in spec:
                t = spec["tcpSocket"]
                host = t.get("host") or pod_ip
                port = _port(container, t.get("port"))
                return await self._tcp(owner, host, port, timeout)
            if "grpc" in spec:
                g = spec["grpc"]
                service = g.get("service") or ""
                return await self._grpc(owner, pod_ip, int(g["port"]), service, timeout)
        except ValueError as err:
            return Result.FAILURE, str(err)
        log.warning("probe with no handler for container %s", container.get("name"))
        return Result.UNKNOWN, "probe has no handler"

    async def _exec(self, cid: str, cmd: list[str], timeout: float) -> tuple[Result, str]:
        try:
            resp = await self.runtime.exec_sync(cid, cmd, timeout)
        except (errors.CRIError, TimeoutError) as err:
            msg = str(err)
            if "deadline" in msg.lower() or "timeout" in msg.lower():
                return Result.FAILURE, f"command timed out after {timeout:g}s"
            return Result.UNKNOWN, msg
        out = (resp.stdout + resp.stderr).decode(errors="replace")[:10240]
        if resp.exit_code == 0:
            return Result.SUCCESS, out
        return Result.FAILURE, out or f"command exited with {resp.exit_code}"

    async def _http_get(
        self, owner: str, url: yarl.URL, headers: dict[str, str], timeout: float
    ) -> tuple[Result, str]:
        try:
            async with asyncio.timeout(timeout):
                reply = await self.http.get(owner, url, headers)
        except TimeoutError:
            return Result.FAILURE, f'Get "{url}": context deadline exceeded'
        except RedirectError as err:
            return Result.FAILURE, str(err)
        except (aiohttp.ClientError, OSError, ValueError) as err:
            return Result.FAILURE, f'Get "{url}": {err}'
        body = reply.body.decode(errors="replace")
        if 200 <= reply.status < 300:
            return Result.SUCCESS, body
        if 300 <= reply.status < 400:
            # A redirect to another host is not followed: a success with a warning.
            return Result.WARNING, f"Probe terminated redirects, Response body: {body}"
        return Result.FAILURE, f"HTTP probe failed with statuscode: {reply.status}"

    async def _tcp(self, owner: str, host: str, port: int, timeout: float) -> tuple[Result, str]:
        addr = join_host_port(host, port)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout), self.http.slots.hold(owner):
                family, ip = await self.http.resolver.resolve(owner, host, port)
                sock = probe_socket(family)
                try:
                    await loop.sock_connect(sock, (ip, port))
                finally:
                    sock.close()
        except TimeoutError:
            return Result.FAILURE, f"dial tcp {addr}: i/o timeout"
        except OSError as err:
            return Result.FAILURE, f"dial tcp {addr}: {err.strerror or err}"
        return Result.SUCCESS, ""

    async def _grpc(
        self, owner: str, host: str, port: int, service: str, timeout: float
    ) -> tuple[Result, str]:
        # grpc.health.v1.Health/Check by hand: request field 1 = service, reply
        # field 1 = status (1 = SERVING); no generated stubs needed for two fields.
        svc = service.encode()
        req = (b"\x0a" + _varint(len(svc)) + svc) if svc else b""
        scheme = "ipv6" if ip_family(host) == socket.AF_INET6 else "ipv4"
        hostport = join_host_port(host, port)
        target = f"{scheme}:{hostport}" if ip_family(host) else hostport
        try:
            async with asyncio.timeout(timeout), self.http.slots.hold(owner):
                async with grpc.aio.insecure_channel(target, options=_GRPC_OPTIONS) as ch:
                    call = ch.unary_unary(
                        "/grpc.health.v1.Health/Check",
                        request_serializer=lambda b: b,
                        response_deserializer=lambda b: b,
                    )
                    raw = await call(req, timeout=timeout)
        except TimeoutError:
            return (
                Result.FAILURE,
                "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
            )
        except grpc.aio.AioRpcError as err:
            return Result.FAILURE, f"rpc error: code = {err.code().name} desc = {err.details()}"
        status = raw[1] if len(raw) >= 2 and raw[0] == 0x08 else 0
        if status == 1:
            return Result.SUCCESS, ""
        return Result.FAILURE, f"service unhealthy (responded with {status})"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def http_request(
    container: Container, h: HTTPGetAction, pod_ip: str
) -> tuple[yarl.URL, dict[str, str]]:
    """The URL and headers of an httpGet probe (NewRequestForHTTPGetAction)."""
    scheme = (h.get("scheme") or "HTTP").lower()
    host = h.get("host") or pod_ip
    port = _port(container, h.get("port"))
    path = h.get("path") or "/"
    if not path.startswith("/"):
        path = "/" + path
    url = yarl.URL(f"{scheme}://{join_host_port(host, port)}{path}", encoded=False)
    headers = {"User-Agent": "kube-probe/1.34", "Accept": "*/*"}
    for hd in h.get("httpHeaders") or []:
        headers[hd["name"]] = hd["value"]
    return url, headers
