"""The API server pod source (pkg/kubelet/config/apiserver.go).

List + watch of the pods bound to this node (fieldSelector spec.nodeName) by a
Reflector on raw JSON. A list replaces the source's snapshot in PodConfig; each
watch event changes one pod there, so a busy watch costs O(1) per event
(upstream hands PodConfig the whole set on every change).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient
from kubelet.config.config import PodConfig
from kubelet.types import API_SOURCE, CONFIG_SEEN, CONFIG_SOURCE, JSONObject, Pod, as_pod
from kubelet.util.pod_startup_latency import PodStartupLatencyTracker

log = logging.getLogger(__name__)


def _annotate(doc: JSONObject) -> Pod:
    """A pod from the API (the watch's JSON) with its source annotations."""
    pod = as_pod(doc)
    md = pod.setdefault("metadata", {})
    ann = md.get("annotations") or {}
    md["annotations"] = ann
    ann[CONFIG_SOURCE] = API_SOURCE
    ann.setdefault(CONFIG_SEEN, md.get("creationTimestamp", ""))
    return pod


class APIServerSource:
    def __init__(
        self, client: APIClient, node_name: str, config: PodConfig,
        startup: PodStartupLatencyTracker | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        # Sees every pod the watch delivers: the startup SLI ends there.
        self.startup = startup
        self.pods: dict[str, Pod] = {}  # the API's current copy of every pod bound here
        self.reflector = Reflector(
            client,
            "/api/v1/pods",
            {"fieldSelector": f"spec.nodeName={node_name}"},
            self._on_list,
            self._on_event,
        )

    async def _on_list(self, items: list[dict[str, Any]]) -> None:
        pods = [_annotate(p) for p in items]
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        if self.startup is not None:
            self.startup.retain(set(self.pods))
            now = time.time()
            for p in pods:
                self.startup.observed_pod_on_watch(p, now)
        self.config.set_pods(API_SOURCE, pods)

    async def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        pod = _annotate(obj)
        u = pod["metadata"].get("uid")
        if not u:
            return
        if etype == "DELETED":
            self.pods.pop(u, None)
            if self.startup is not None:
                self.startup.delete(u)
            self.config.remove(API_SOURCE, pod)
        elif etype in ("ADDED", "MODIFIED"):
            if self.startup is not None:
                self.startup.observed_pod_on_watch(pod, time.time())
            self.pods[u] = pod
            self.config.upsert(API_SOURCE, pod)

    def get(self, uid: str) -> Pod | None:
        return self.pods.get(uid)

    async def run(self, stop: asyncio.Event, node_synced: asyncio.Event | None = None) -> None:
        """node_synced: the node informer's first list. Pods are listed only
        after it, as upstream, so none is admitted against a node not yet read."""
        if node_synced is not None and not node_synced.is_set():
            log.info("Waiting for node sync before watching apiserver pods")
            waits = [asyncio.ensure_future(node_synced.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if stop.is_set():
                return
        await self.reflector.run(stop)
