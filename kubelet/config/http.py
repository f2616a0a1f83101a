"""Pods from a manifest URL (--manifest-url), polled every httpCheckFrequency."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import aiohttp

from kubelet.config.common import ManifestError, apply_defaults, decode_manifest
from kubelet.config.config import PodConfig
from kubelet.types import HTTP_SOURCE

log = logging.getLogger(__name__)


class HTTPSource:
    def __init__(
        self,
        url: str,
        headers: dict[str, list[str]],
        node_name: str,
        period: float,
        config: PodConfig,
    ) -> None:
        self.url = url
        self.headers = [(k, v) for k, vs in headers.items() for v in vs]
        self.node_name = node_name
        self.period = period
        self.config = config
        self._last_hash = ""

    async def fetch_once(self, session: aiohttp.ClientSession) -> None:
        async with session.get(
            self.url, headers=self.headers, timeout=aiohttp.ClientTimeout(total=10)
        ) as r:
            if r.status != 200:
                raise ManifestError(f"{self.url}: HTTP {r.status}")
            data = await r.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._last_hash:
            return
        pods = []
        for doc in decode_manifest(data) if data.strip() else []:
            try:
                pods.append(apply_defaults(doc, self.url, HTTP_SOURCE, self.node_name))
            except ManifestError as err:
                log.error("Invalid pod from %s: %s", self.url, err)
        self._last_hash = digest
        self.config.set_pods(HTTP_SOURCE, pods)

    async def run(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                try:
                    await self.fetch_once(session)
                except Exception as err:
                    # Keep the pods we have: a flaky endpoint must not kill them.
                    log.warning("Failed to read pods from URL %s: %s", self.url, err)
                try:
                    await asyncio.wait_for(stop.wait(), self.period)
                except TimeoutError:
                    pass
