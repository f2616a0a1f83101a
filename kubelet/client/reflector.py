"""List-then-watch with resourceVersion tracking (client-go's Reflector), on raw JSON.

The handler sees a full replacement after every list ("sync") and then each
watch event in order. A broken watch resumes from the last resourceVersion it
saw (bookmarks included); 410 Gone, or a watch that cannot be resumed,
re-lists; errors back off from 800ms to 30s, as upstream.

Every object is made compact on arrival, as the kubelet keeps one of each per
pod: metadata.managedFields go (client-go's TransformStripManagedFields; no
part of the kubelet reads them, and on a pod they are close to half of it),
and short string values are interned, so the image, policies, condition types
and timestamps that thousands of pods repeat are held once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubelet.client.rest import APIClient, APIError

log = logging.getLogger(__name__)

ListHandler = Callable[[list[dict[str, Any]]], Awaitable[None]]
EventHandler = Callable[[str, dict[str, Any]], Awaitable[None]]


# Longer values (certificates, config map data, container IDs) are seldom
# shared; interning them would only cost the intern table's entries.
_INTERN_MAX = 64


def compact(obj: dict[str, Any]) -> dict[str, Any]:
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
    _intern(obj)
    return obj


def _intern(node: dict[str, Any] | list[Any]) -> None:
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        if type(v) is str:
            if len(v) <= _INTERN_MAX:
                node[k] = sys.intern(v)  # type: ignore[index]  # same key: no resize
        elif type(v) is dict or type(v) is list:
            _intern(v)


class Reflector:
    def __init__(
        self,
        client: APIClient,
        path: str,
        params: dict[str, str],
        on_list: ListHandler,
        on_event: EventHandler,
        watch_timeout: float = 300.0,
    ) -> None:
        self.client = client
        self.path = path
        self.params = params
        self.on_list = on_list
        self.on_event = on_event
        self.watch_timeout = watch_timeout
        self.resource_version = ""
        self.lists = 0
        self.watches = 0
        self.watch_events = 0  # events the current (or last) watch delivered
        self.synced = asyncio.Event()

    async def list(self) -> None:
        doc = await self.client.get(self.path, params=dict(self.params))
        self.resource_version = str(doc.get("metadata", {}).get("resourceVersion", ""))
        self.lists += 1
        await self.on_list([compact(o) for o in doc.get("items") or []])
        self.synced.set()

    async def watch_once(self) -> None:
        params = dict(
            self.params,
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(int(self.watch_timeout)),
        )
        self.watches += 1
        self.watch_events = 0
        async for etype, obj in self.client.watch(self.path, params):
            self.watch_events += 1
            if etype == "ERROR":
                code = int(obj.get("code", 0) or 0)
                raise APIError(code, str(obj.get("reason", "")), str(obj.get("message", "")), obj)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if etype == "BOOKMARK":
                continue
            await self.on_event(etype, compact(obj))

    async def run(self, stop: asyncio.Event) -> None:
        backoff = 0.8
        need_list = True
        started = time.monotonic()
        while not stop.is_set():
            try:
                if need_list:
                    await self.list()
                    need_list = False
                started = time.monotonic()
                watch = asyncio.ensure_future(self.watch_once())
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({watch, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if watch not in done:
                    watch.cancel()
                    await asyncio.gather(watch, return_exceptions=True)
                    return
                stopper.cancel()
                watch.result()  # a server-side timeout ends cleanly: watch again
                backoff = 0.8
            except asyncio.CancelledError:
                raise
            except APIError as err:
                if err.gone:
                    log.info("watch of %s expired (410 Gone); re-listing", self.path)
                    need_list = True
                    continue
                log.warning("list/watch %s failed: %s", self.path, err)
                await self._sleep(stop, backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as err:  # the watch loop must survive: logged, then retried
                # Mostly connection trouble: resume the watch from the last version seen.
                # A watch that worked (an event, or open a second) and then broke
                # resumes at once, as client-go's does; only one that fails
                # straight away (or a list) backs off, so a connection cut every
                # few seconds does not leave the kubelet blind for 30 s each time.
                if not need_list and (self.watch_events > 0 or time.monotonic() - started >= 1.0):
                    log.info("watch of %s ended: %r; resuming", self.path, err)
                    backoff = 0.8
                    continue
                log.warning("list/watch %s failed, retrying in %.1fs: %r", self.path, backoff, err)
                await self._sleep(stop, backoff)
                backoff = min(backoff * 2, 30.0)

    @staticmethod
    async def _sleep(stop: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            pass
