"""Caches in front of TokenReview and SubjectAccessReview (k8s.io/apiserver's
token cache and the webhook authorizer's response cache).

A network peer of the kubelet port chooses the bearer tokens it sends, so the
token side is built to hold under a flood of random tokens:
- a token is never a key: an HMAC of it with a per-process random key is, so a
  cache entry costs the same for a 16 KiB token as for a short one;
- answers that a token is not valid are cached for cacheTTL like valid ones,
  in a cache of their own, so a flood of bad tokens cannot evict good ones;
- both are LRU with a size bound: past it the least recently used entry goes,
  never the whole cache;
- concurrent requests with the same token share one review, at most
  MAX_INFLIGHT reviews run at once and at most MAX_WAITING wait: past that a
  request fails (401) at once instead of queueing without bound. Errors (the
  API server did not answer) are not cached, as upstream.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

TOKEN_CACHE_SIZE = 10_000  # per kind (authenticated / not)
DECISION_CACHE_SIZE = 8192  # upstream's webhook authorizer
MAX_INFLIGHT = 16
MAX_WAITING = 512


class ExpiringLRU(Generic[K, V]):
    """At most `size` entries, each expiring at its own deadline; when full, the
    least recently used entry makes room."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self._d: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: K) -> tuple[bool, V | None]:
        """(found, value)."""
        hit = self._d.get(key)
        if hit is None:
            return False, None
        if hit[0] <= self.clock():
            del self._d[key]
            return False, None
        self._d.move_to_end(key)
        return True, hit[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._d[key] = (self.clock() + ttl, value)
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)


class ReviewError(Exception):
    """A review that could not be made: not cached, the request gets 401 (or 500)."""


class CachedTokenAuthenticator(Generic[V]):
    """Token -> V (the reviewed user) or None (not a valid token)."""

    def __init__(
        self,
        review: Callable[[str], Awaitable[V | None]],
        ttl: float,
        *,
        size: int = TOKEN_CACHE_SIZE,
        max_inflight: int = MAX_INFLIGHT,
        max_waiting: int = MAX_WAITING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review = review
        self.ttl = ttl
        self._hmac_key = os.urandom(32)
        self._valid: ExpiringLRU[bytes, V] = ExpiringLRU(size, clock)
        self._invalid: ExpiringLRU[bytes, bool] = ExpiringLRU(size, clock)
        self._pending: dict[bytes, asyncio.Future[V | None]] = {}
        self._slots = asyncio.Semaphore(max_inflight)
        self.max_waiting = max_waiting
        self.reviews = 0  # reviews made (metrics, tests)

    def cached(self) -> int:
        return len(self._valid) + len(self._invalid)

    async def authenticate(self, token: str) -> V | None:
        key = hmac.new(self._hmac_key, token.encode(), hashlib.sha256).digest()
        found, user = self._valid.get(key)
        if found:
            return user
        if self._invalid.get(key)[0]:
            return None
        fut = self._pending.get(key)
        if fut is None:
            if len(self._pending) >= self.max_waiting:
                raise ReviewError("too many token reviews in progress")
            fut = asyncio.ensure_future(self._run(key, token))
            fut.add_done_callback(_retrieve)  # every waiter may have left
            self._pending[key] = fut
        # Shielded: a client that goes away does not cancel a review others wait on.
        return await asyncio.shield(fut)

    async def _run(self, key: bytes, token: str) -> V | None:
        try:
            async with self._slots:
                self.reviews += 1
                user = await self._review(token)
        finally:
            del self._pending[key]
        if user is None:
            self._invalid.put(key, True, self.ttl)
        else:
            self._valid.put(key, user, self.ttl)
        return user


def _retrieve(fut: asyncio.Future[V]) -> None:
    if not fut.cancelled():
        fut.exception()
