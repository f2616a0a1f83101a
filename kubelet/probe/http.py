"""HTTP GET for probes and lifecycle hooks (pkg/probe/http upstream).

Each request gets a connection of its own that is closed after it (upstream
turns keep-alive off): no pool with a limit one pod could fill with endpoints
that accept and never answer, no cookie jar a reply could grow, no automatic
decompression of a body the kubelet reads only 10 KiB of. Host names resolve
through the per-pod Resolver. The caller bounds the time of the whole request
(connect, headers and body), as upstream's client timeout does.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import aiohttp
import yarl

from kubelet.probe.dial import PodSlots, Resolver, ip_family, join_host_port
from kubelet.util.httpio import read_at_most

MAX_BODY = 10 * 1024  # upstream reads at most this much of a reply
MAX_REDIRECTS = 10  # Go's http.Client
# A reply's status line and each header: Go allows 1 MiB of headers in all.
MAX_HEADER_LINE = 64 * 1024
_FOLLOWED = (301, 302, 303, 307, 308)

_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE


class RedirectError(Exception):
    """Too many redirects, or one to a scheme that is not http(s)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes  # at most MAX_BODY bytes of it
    url: yarl.URL  # the URL that gave this reply


def host_header(url: yarl.URL) -> str:
    """What Go sends as Host for a URL: its host, and its port if the URL names one."""
    host = url.raw_host or ""
    port = url.explicit_port
    if port is None:
        return f"[{host}]" if ":" in host else host
    return join_host_port(host, port)


class HTTPGetter:
    def __init__(self, resolver: Resolver | None = None, slots: PodSlots | None = None) -> None:
        self.resolver = resolver or Resolver()
        # Shared with the prober's TCP and gRPC probes: one bound per pod for all.
        self.slots = slots or PodSlots()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,
                    limit_per_host=0,
                    force_close=True,
                    use_dns_cache=False,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding",),
                max_line_size=MAX_HEADER_LINE,
                max_field_size=MAX_HEADER_LINE,
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(self, owner: str, url: yarl.URL, headers: dict[str, str]) -> Reply:
        """GET url for `owner` (a pod UID), following redirects on the same host
        only (upstream's followNonLocalRedirects=false): a redirect elsewhere is
        the reply. Raises aiohttp.ClientError, OSError or RedirectError."""
        first = url.host
        for _ in range(MAX_REDIRECTS + 1):
            async with self.slots.hold(owner):
                reply, location = await self._once(owner, url, headers)
            if reply.status not in _FOLLOWED or not location:
                return reply
            nxt = url.join(yarl.URL(location))
            if nxt.host != first:
                return reply
            if nxt.scheme not in ("http", "https"):
                raise RedirectError(f'Get "{nxt}": unsupported protocol scheme "{nxt.scheme}"')
            url = nxt
        raise RedirectError(f'Get "{url}": stopped after {MAX_REDIRECTS} redirects')

    async def _once(
        self, owner: str, url: yarl.URL, headers: dict[str, str]
    ) -> tuple[Reply, str | None]:
        host = url.host or ""
        port = url.port or (443 if url.scheme == "https" else 80)
        _, addr = await self.resolver.resolve(owner, host, port)
        sent = dict(headers)
        if not any(k.lower() == "host" for k in sent):
            sent["Host"] = host_header(url)
        https = url.scheme == "https"
        async with self._client().get(
            url.with_host(addr),
            headers=sent,
            ssl=_INSECURE if https else False,
            server_hostname=host if https and ip_family(host) is None else None,
            allow_redirects=False,
        ) as r:
            body = await read_at_most(r.content, MAX_BODY)
            return Reply(r.status, body, url), r.headers.get("Location")
