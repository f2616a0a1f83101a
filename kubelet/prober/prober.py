"""One probe attempt (pkg/kubelet/prober/prober.go): exec through CRI ExecSync,
HTTP GET, TCP connect, or gRPC health check, each bounded by timeoutSeconds."""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from typing import Any

import aiohttp
import grpc
import yarl

from kubelet.types import Pod

log = logging.getLogger(__name__)


class Result(enum.Enum):
    SUCCESS = "Success"
    # Counts as a success, with a ProbeWarning event (an HTTP probe that stopped
    # at a redirect to another host).
    WARNING = "Warning"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


MAX_REDIRECTS = 10


_NO_VERIFY = ssl.create_default_context()
_NO_VERIFY.check_hostname = False
_NO_VERIFY.verify_mode = ssl.CERT_NONE


def _port(pod: Pod, container: dict[str, Any], port: Any) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"unknown port name {port!r}")


class Prober:
    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def probe(
        self, pod: Pod, container: dict[str, Any], container_id: str, spec: dict[str, Any]
    ) -> tuple[Result, str]:
        timeout = float(spec.get("timeoutSeconds") or 1)
        pod_ip = (pod.get("status") or {}).get("podIP") or ""
        try:
            if "exec" in spec:
                return await self._exec(container_id, spec["exec"].get("command") or [], timeout)
            if "httpGet" in spec:
                return await self._http_get(pod, container, spec["httpGet"], pod_ip, timeout)
            if "tcpSocket" in spec:
                t = spec["tcpSocket"]
                host = t.get("host") or pod_ip
                return await self._tcp(host, _port(pod, container, t.get("port")), timeout)
            if "grpc" in spec:
                g = spec["grpc"]
                return await self._grpc(pod_ip, int(g["port"]), g.get("service") or "", timeout)
        except ValueError as err:
            return Result.FAILURE, str(err)
        log.warning("probe with no handler for container %s", container.get("name"))
        return Result.UNKNOWN, "probe has no handler"

    async def _exec(self, cid: str, cmd: list[str], timeout: float) -> tuple[Result, str]:
        try:
            resp = await self.runtime.exec_sync(cid, cmd, timeout)
        except Exception as err:
            msg = str(err)
            if "deadline" in msg.lower() or "timeout" in msg.lower():
                return Result.FAILURE, f"command timed out after {timeout:g}s"
            return Result.UNKNOWN, msg
        out = (resp.stdout + resp.stderr).decode(errors="replace")[:10240]
        if resp.exit_code == 0:
            return Result.SUCCESS, out
        return Result.FAILURE, out or f"command exited with {resp.exit_code}"

    async def _http_get(
        self, pod: Pod, container: dict[str, Any], h: dict[str, Any], pod_ip: str, timeout: float
    ) -> tuple[Result, str]:
        scheme = (h.get("scheme") or "HTTP").lower()
        host = h.get("host") or pod_ip
        port = _port(pod, container, h.get("port"))
        path = h.get("path") or "/"
        if not path.startswith("/"):
            path = "/" + path
        url = f"{scheme}://{host}:{port}{path}"
        headers = {"User-Agent": "kube-probe/1.34", "Accept": "*/*"}
        for hd in h.get("httpHeaders") or []:
            headers[hd["name"]] = hd["value"]
        if self._http is None:
            self._http = aiohttp.ClientSession()
        # Redirects are followed on the same host only (upstream's
        # followNonLocalRedirects=false): a probe must not be sent elsewhere by
        # the container it checks. Stopping at one is a success with a warning.
        target = yarl.URL(url)
        try:
            async with asyncio.timeout(timeout):
                for _ in range(MAX_REDIRECTS + 1):
                    async with self._http.get(
                        target,
                        headers=headers,
                        ssl=_NO_VERIFY if target.scheme == "https" else False,
                        allow_redirects=False,
                    ) as r:
                        body = (await r.content.read(10240)).decode(errors="replace")
                        location = r.headers.get("Location")
                        if 300 <= r.status < 400:
                            nxt = target.join(yarl.URL(location)) if location else None
                            if nxt is not None and nxt.host == target.host:
                                target = nxt
                                continue
                            return (
                                Result.WARNING,
                                f"Probe terminated redirects, Response body: {body}",
                            )
                        if 200 <= r.status < 300:
                            return Result.SUCCESS, body
                        return Result.FAILURE, f"HTTP probe failed with statuscode: {r.status}"
                return Result.FAILURE, f'Get "{target}": stopped after {MAX_REDIRECTS} redirects'
        except TimeoutError:
            return Result.FAILURE, f'Get "{url}": context deadline exceeded'
        except (aiohttp.ClientError, ValueError) as err:
            return Result.FAILURE, f'Get "{url}": {err}'

    async def _tcp(self, host: str, port: int, timeout: float) -> tuple[Result, str]:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, TimeoutError) as err:
            return Result.FAILURE, f"dial tcp {host}:{port}: {err or 'i/o timeout'}"
        w.close()
        return Result.SUCCESS, ""

    async def _grpc(self, host: str, port: int, service: str, timeout: float) -> tuple[Result, str]:
        # grpc.health.v1.Health/Check by hand: request field 1 = service, reply
        # field 1 = status (1 = SERVING); no generated stubs needed for two fields.
        svc = service.encode()
        req = (b"\x0a" + bytes([len(svc)]) + svc) if svc else b""
        async with grpc.aio.insecure_channel(f"{host}:{port}") as ch:
            call = ch.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            try:
                raw = await call(req, timeout=timeout)
            except grpc.aio.AioRpcError as err:
                return Result.FAILURE, f"rpc error: code = {err.code().name} desc = {err.details()}"
        status = raw[1] if len(raw) >= 2 and raw[0] == 0x08 else 0
        if status == 1:
            return Result.SUCCESS, ""
        return Result.FAILURE, f"service unhealthy (responded with {status})"
