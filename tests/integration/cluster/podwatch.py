"""A watch on pods through the real API server, opened before a test acts and
kept until it is told to stop, so the test can check every status the pods
went through (as upstream's e2e tests watch them), not only the last one.

It runs on its own thread and event loop with the admin kubeconfig; a watch the
server ends is re-opened from the last resourceVersion seen, so no event is
lost in between.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient, APIError
from kubelet.testing.wait import wait_for

Event = tuple[str, dict[str, Any]]


class PodWatch:
    def __init__(self, kubeconfig: str, namespace: str, label_selector: str) -> None:
        self.kubeconfig = kubeconfig
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.selector = label_selector
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="podwatch", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise AssertionError(f"pod watch did not start: {self.error!r}")

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as err:  # reported through .error and wait_for
            self.error = err
            self._ready.set()

    async def _watch(self) -> None:
        client = APIClient(load_kubeconfig(self.kubeconfig), qps=100, burst=100)
        try:
            listed = await client.get(self.path, params={"labelSelector": self.selector})
            rv = listed["metadata"]["resourceVersion"]
            with self._lock:
                self.events.extend(("ADDED", p) for p in listed.get("items") or [])
            self._ready.set()
            while not self._stop.is_set():
                params = {"labelSelector": self.selector, "resourceVersion": rv,
                          "timeoutSeconds": "2", "allowWatchBookmarks": "true"}  # fmt: skip
                try:
                    async for kind, obj in client.watch(self.path, params):
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            with self._lock:
                                self.events.append((kind, obj))
                except APIError as err:
                    if not err.gone:
                        raise
                    raise AssertionError(f"watch fell behind the API server: {err}") from err
        finally:
            await client.close()

    # ------------------------------------------------------------ queries
    def of(self, name: str, uid: str | None = None) -> list[Event]:
        """The events of the pod(s) with this name (one incarnation if uid is given)."""
        with self._lock:
            return [
                (k, p)
                for k, p in self.events
                if p["metadata"]["name"] == name and (uid is None or p["metadata"]["uid"] == uid)
            ]

    def wait_for(self, what: str, fn: Callable[[list[Event]], Any], timeout: float = 120.0) -> Any:
        """Wait until fn(all events so far) is truthy; return it."""

        def seen() -> Any:
            if self.error is not None:
                raise AssertionError(f"pod watch failed: {self.error!r}")
            with self._lock:
                snapshot = list(self.events)
            return fn(snapshot)

        return wait_for(what, seen, timeout, every=0.2, retry_on=())

    def last(self, name: str) -> dict[str, Any] | None:
        ev = self.of(name)
        return ev[-1][1] if ev else None
