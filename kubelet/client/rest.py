"""A small async REST client for the API server on aiohttp + orjson.

Connection details and credentials come from the official `kubernetes`
package (kubeconfig files, in-cluster config, exec plugins, token refresh);
requests go through aiohttp with raw bytes and orjson, which keeps the hot
paths (pod watch, status patches) free of the generated model classes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from kubelet.client import metrics as rm
from kubelet.client.certificate import CertificateFile, CertificateSource
from kubelet.client.kubeconfig import ConnectionConfig
from kubelet.client.ratelimit import TokenBucket

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class APIError(Exception):
    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410


# What one API call may fail with: the server's answer, the connection, the
# deadline, or a body that is no JSON.
API_ERRORS: tuple[type[Exception], ...] = (
    APIError,
    aiohttp.ClientError,
    OSError,
    TimeoutError,
    orjson.JSONDecodeError,
)


class APIClient:
    """One logical client: its own rate limit and timeout, as client-go clients have."""

    def __init__(
        self,
        conn: ConnectionConfig,
        qps: float,
        burst: int,
        timeout: float | None = None,
        user_agent: str = "kubelet-py",
        cert_source: CertificateSource | None = None,
    ) -> None:
        self.conn = conn
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.user_agent = user_agent
        # A rotating client certificate (rotateCertificates): read before each
        # request; when it changes, new requests go through a new session with
        # the new pair while requests and watches already open on the old one
        # finish there (it closes once its certificate expires).
        self._cert_source = cert_source
        self._cert: CertificateFile | None = None
        self._retired: set[asyncio.TimerHandle] = set()
        self._retired_sessions: set[aiohttp.ClientSession] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self.requests = 0  # requests made, for metrics and tests
        self._host = urlsplit(conn.host).netloc  # the host label of rest_client_*

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.conn.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.conn.ca_file)
        if not self.conn.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self._cert is not None:
            ctx.load_cert_chain(self._cert.path)
        elif self.conn.cert_file:
            ctx.load_cert_chain(self.conn.cert_file, self.conn.key_file)
        return ctx

    def _check_rotation(self) -> None:
        if self._cert_source is None:
            return
        cert = self._cert_source.current_certificate()
        if cert is None or cert == self._cert:
            return
        old, old_cert = self._session, self._cert
        self._cert = cert
        self._session = None
        if old is not None and not old.closed:
            log.info("Client certificate rotated; new connections use %s", cert.path)
            self._retire(old, old_cert.not_after if old_cert else 0.0)

    def _retire(self, session: aiohttp.ClientSession, not_after: float) -> None:
        loop = asyncio.get_running_loop()
        self._retired_sessions.add(session)

        handle: asyncio.TimerHandle | None = None

        def close() -> None:
            self._retired_sessions.discard(session)
            if handle is not None:
                self._retired.discard(handle)
            task = loop.create_task(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

        # Past its certificate's expiry the API server refuses the old
        # connections anyway; until then long watches may run to their end.
        delay = max(0.0, not_after - time.time()) if not_after else 0.0
        handle = loop.call_later(delay, close)
        self._retired.add(handle)

    @property
    def session(self) -> aiohttp.ClientSession:
        self._check_rotation()
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=100, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(
                connector=connector,
                json_serialize=lambda o: orjson.dumps(o).decode(),
                headers={"User-Agent": self.user_agent, "Accept": JSON},
            )
        return self._session

    def _headers(self, content_type: str | None) -> dict[str, str]:
        h = {}
        if content_type:
            h["Content-Type"] = content_type
        if self.conn.token:
            tok = self.conn.token()
            if tok:
                h["Authorization"] = tok
        return h

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> Any:
        """Send a request; return the decoded JSON body, raise APIError on failure."""
        await self._wait_turn(method)
        data = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
        t = timeout if timeout is not None else self.timeout
        self.requests += 1
        rm.REQUEST_SIZE.labels(method, self._host).observe(len(data) if data else 0)
        start = time.perf_counter()
        code = rm.ERROR_CODE
        try:
            async with self.session.request(
                method,
                self.conn.host + path,
                data=data,
                params=params,
                headers=self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(total=t),
            ) as resp:
                code = str(resp.status)
                raw = await resp.read()
        finally:
            self._observe(method, code, start)
        rm.RESPONSE_SIZE.labels(method, self._host).observe(len(raw))
        if resp.status >= 400:
            raise _error(resp.status, raw)
        return orjson.loads(raw) if raw else None

    def _observe(self, verb: str, code: str, start: float) -> None:
        rm.REQUEST_DURATION.labels(verb, self._host).observe(time.perf_counter() - start)
        rm.REQUESTS.labels(code, verb, self._host).inc()

    async def _wait_turn(self, verb: str) -> None:
        """The client-side rate limiter (kubeAPIQPS / kubeAPIBurst), timed."""
        start = time.perf_counter()
        await self.limiter.acquire()
        rm.RATE_LIMITER_DURATION.labels(verb, self._host).observe(time.perf_counter() - start)

    async def get(self, path: str, **kw: Any) -> Any:
        return await self.request("GET", path, **kw)

    async def create(self, path: str, obj: Any, **kw: Any) -> Any:
        return await self.request("POST", path, obj, **kw)

    async def update(self, path: str, obj: Any, **kw: Any) -> Any:
        return await self.request("PUT", path, obj, **kw)

    async def patch(self, path: str, patch: Any, content_type: str = MERGE_PATCH, **kw: Any) -> Any:
        return await self.request("PATCH", path, patch, content_type=content_type, **kw)

    async def delete(self, path: str, options: Any = None, **kw: Any) -> Any:
        return await self.request("DELETE", path, options, **kw)

    async def watch(
        self, path: str, params: dict[str, str], timeout: float | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Stream watch events as (type, object); ends when the server closes the stream."""
        await self._wait_turn("GET")
        self.requests += 1
        q = dict(params, watch="true")
        start = time.perf_counter()
        answered = False
        try:
            async with self.session.get(
                self.conn.host + path,
                params=q,
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=timeout, sock_read=None),
            ) as resp:
                # A watch's latency is until its answer starts, as client-go's.
                answered = True
                self._observe("GET", str(resp.status), start)
                if resp.status >= 400:
                    raise _error(resp.status, await resp.read())
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while True:
                        nl = buf.find(b"\n")
                        if nl < 0:
                            break
                        line, buf = buf[:nl], buf[nl + 1 :]
                        if line.strip():
                            ev = orjson.loads(line)
                            yield ev.get("type", ""), ev.get("object") or {}
        except (aiohttp.ClientError, OSError):
            if not answered:
                self._observe("GET", rm.ERROR_CODE, start)
            raise

    async def close(self) -> None:
        for handle in self._retired:
            handle.cancel()
        self._retired.clear()
        for old in list(self._retired_sessions):
            await old.close()
        self._retired_sessions.clear()
        if self._session is not None:
            await self._session.close()
            # Let the SSL transports finish closing before the loop goes away.
            await asyncio.sleep(0)


def _error(status: int, raw: bytes) -> APIError:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return APIError(status, "", raw.decode(errors="replace")[:500])
    if isinstance(doc, dict):
        return APIError(status, str(doc.get("reason", "")), str(doc.get("message", "")), doc)
    return APIError(status, "", str(doc)[:500])
