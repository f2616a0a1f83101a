"""How image pulls are scheduled (pkg/kubelet/images/puller.go and the
throttled image service of helpers.go upstream).

- serializeImagePulls (default true): one pull at a time on the whole node, in
  the order asked.
- serializeImagePulls false: pulls run in parallel, at most maxParallelImagePulls
  at once when set (unbounded when not).
- registryPullQPS / registryBurst: a token bucket in front of the runtime's
  PullImage; a pull that finds it empty fails at once with "pull QPS exceeded"
  (ErrImagePull, then the image back-off), as upstream. A QPS of 0 is no limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from kubelet.client.ratelimit import TokenBucket

if TYPE_CHECKING:
    from kubelet.apis.config import KubeletConfiguration

T = TypeVar("T")


class PullQPSExceeded(Exception):
    def __init__(self) -> None:
        super().__init__("pull QPS exceeded")


class ImagePuller:
    def __init__(
        self,
        serialize: bool = True,
        max_parallel: int | None = None,
        qps: float = 0.0,
        burst: int = 0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        limit = 1 if serialize else (max_parallel if max_parallel and max_parallel > 0 else 0)
        self.limit = limit  # 0: unbounded
        self._slots = asyncio.Semaphore(limit) if limit else None
        self._bucket = TokenBucket(qps, burst, clock) if qps > 0 else None

    @classmethod
    def from_config(cls, cfg: KubeletConfiguration) -> ImagePuller:
        return cls(
            cfg.serialize_image_pulls,
            cfg.max_parallel_image_pulls,
            cfg.registry_pull_qps,
            cfg.registry_burst,
        )

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        async with self._slots:  # FIFO among the waiters
            yield

    async def pull(self, do_pull: Callable[[], Awaitable[T]]) -> T:
        """Run `do_pull` (the whole PullImage, every credential tried) when a
        slot is free; raises PullQPSExceeded when the bucket is empty then."""
        async with self._slot():
            if self._bucket is not None and not self._bucket.try_acquire():
                raise PullQPSExceeded()
            return await do_pull()
