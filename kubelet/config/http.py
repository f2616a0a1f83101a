"""Pods from a manifest URL (--manifest-url), polled every httpCheckFrequency
(pkg/kubelet/config/http.go).

Read as upstream reads it: 10 s for the whole request, at most 10 MiB of body
(maxConfigLength; a larger answer is an error, read no further), at most 10
redirects and only to http(s) URLs (Go's client), the --manifest-url-header
credentials dropped when a redirect leaves the host. A failed or broken
answer is logged and the pods from the last good one are kept; an empty
answer means no pods, as upstream.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import aiohttp
import yarl

from kubelet.config.common import ManifestError, decode_manifest, static_pod
from kubelet.config.config import PodConfig
from kubelet.types import HTTP_SOURCE, Pod
from kubelet.util.httpio import read_at_most

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 10 * 1024 * 1024  # upstream's maxConfigLength
MAX_REDIRECTS = 10
TIMEOUT = 10.0
_REDIRECTS = (301, 302, 303, 307, 308)
# Go drops these on a redirect to another host.
_SENSITIVE = frozenset({"authorization", "www-authenticate", "cookie", "cookie2"})


class HTTPSource:
    def __init__(
        self,
        url: str,
        headers: dict[str, list[str]],
        node_name: str,
        period: float,
        config: PodConfig,
        prevent_refs: bool = True,
    ) -> None:
        """prevent_refs: the PreventStaticPodAPIReferences gate."""
        self.url = url
        self.prevent_refs = prevent_refs
        self.headers = [(k, v) for k, vs in headers.items() for v in vs]
        self.node_name = node_name
        self.period = period
        self.config = config
        self._last_hash = ""
        self._failures = 0

    async def fetch_once(self, session: aiohttp.ClientSession) -> None:
        async with asyncio.timeout(TIMEOUT):
            data = await self._get(session)
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._last_hash:
            return
        # A large document is seconds of YAML parsing: off the event loop.
        docs = await asyncio.to_thread(decode_manifest, data) if data.strip() else []
        pods: list[Pod] = []
        for doc in docs:
            try:
                pods.append(
                    static_pod(doc, self.url, HTTP_SOURCE, self.node_name, self.prevent_refs)
                )
            except ManifestError as err:
                log.error("Invalid pod from %s: %s", self.url, err)
        self._last_hash = digest
        self.config.set_pods(HTTP_SOURCE, pods)

    async def _get(self, session: aiohttp.ClientSession) -> bytes:
        url = yarl.URL(self.url)
        headers = list(self.headers)
        for _ in range(MAX_REDIRECTS + 1):
            async with session.get(url, headers=headers, allow_redirects=False) as r:
                location = r.headers.get("Location")
                if r.status in _REDIRECTS and location:
                    nxt = url.join(yarl.URL(location))
                    if nxt.scheme not in ("http", "https"):
                        raise ManifestError(f'redirect to "{nxt}": unsupported protocol scheme')
                    if nxt.host != url.host:
                        headers = [(k, v) for k, v in headers if k.lower() not in _SENSITIVE]
                    url = nxt
                    continue
                data = await read_at_most(r.content, MAX_MANIFEST_BYTES + 1)
                if len(data) > MAX_MANIFEST_BYTES:
                    raise ManifestError(f"{self.url}: larger than {MAX_MANIFEST_BYTES} bytes")
                if r.status != 200:
                    raise ManifestError(f"{self.url}: {r.status} {r.reason}")
                return data
        raise ManifestError(f'Get "{self.url}": stopped after {MAX_REDIRECTS} redirects')

    async def run(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(trust_env=False) as session:
            while not stop.is_set():
                try:
                    await self.fetch_once(session)
                except (aiohttp.ClientError, OSError, ManifestError, ValueError) as err:
                    # Keep the pods we have: a flaky endpoint must not kill them.
                    self._failed(err)
                else:
                    if self._failures:
                        log.info("Successfully read pods from URL %s", self.url)
                    self._failures = 0
                try:
                    await asyncio.wait_for(stop.wait(), self.period)
                except TimeoutError:
                    pass

    def _failed(self, err: Exception) -> None:
        """The first few failures in a row at warning level, then at debug (upstream: V(4))."""
        what = str(err) or type(err).__name__
        if self._failures < 3:
            log.warning("Failed to read pods from URL %s: %s", self.url, what)
        elif self._failures == 3:
            log.warning(
                "Failed to read pods from URL %s: %s (further failures at -v=4)", self.url, what
            )
        else:
            log.debug("Failed to read pods from URL %s: %s", self.url, what)
        self._failures += 1
