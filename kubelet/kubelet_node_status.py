"""Node registration and status updates (pkg/kubelet/kubelet_node_status.go).

Registration creates the Node, or adopts an existing one of the same name and
reconciles its labels; retries with backoff until the API server answers.
Status is computed every nodeStatusUpdateFrequency and patched only when it
changed or nodeStatusReportFrequency has passed since the last report.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kubelet.client.rest import APIClient, APIError
from kubelet.events import Recorder
from kubelet.nodestatus.setters import NodeInputs, compute_status, initial_node, status_changed
from kubelet.types import Node, NodeStatus, ObjectReference
from kubelet.util.node_startup_latency import NodeStartupLatencyTracker

log = logging.getLogger(__name__)

# Labels the kubelet owns and keeps right on an adopted Node (updateDefaultLabels).
_DEFAULT_LABELS = (
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
)


def _ready(node: Node) -> bool:
    """The Node as the API server returned it is Ready."""
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


class RegisteredNode:
    """The Node object as this kubelet last registered or patched it. Built
    before what reads its UID (mirror pods' owner, the Lease) and written only
    by the NodeStatusManager."""

    def __init__(self) -> None:
        self.node: dict[str, Any] | None = None

    def uid(self) -> str | None:
        """The Node's UID once it is registered."""
        uid = (self.node or {}).get("metadata", {}).get("uid")
        return str(uid) if uid else None


class NodeStatusManager:
    def __init__(
        self,
        client: APIClient,
        inputs: NodeInputs,
        recorder: Recorder | None = None,
        registered: RegisteredNode | None = None,
        wake: asyncio.Event | None = None,
        current: Callable[[], Node | None] = lambda: None,
        startup: NodeStartupLatencyTracker | None = None,
    ) -> None:
        """current: the Node as the API server has it now (the node watch), so
        what others set there (extended resources in capacity) is seen within
        a period, not only when this kubelet's own patch returns it.
        startup: times the node's start-up (None: not timed)."""
        self.client = client
        self.inp = inputs
        self.recorder = recorder
        # Set by whoever needs the status reported now (the shutdown manager).
        self.wake = wake or asyncio.Event()
        self.registered = asyncio.Event()
        self._node = registered or RegisteredNode()
        self.last_report = 0.0
        self.patches = 0
        self._last_ready: str | None = None
        self.last_sent: NodeStatus | None = None
        self.current = current
        self.startup = startup

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.inp.name}"

    async def register(self) -> dict[str, Any]:
        """registerWithAPIServer: loops with backoff (100ms doubling to 7s) until it works."""
        delay = 0.1
        if self.startup is not None:
            self.startup.attempt_register()
        while True:
            node = initial_node(self.inp)
            try:
                self.node = await self.client.create("/api/v1/nodes", node)
                if self.startup is not None:
                    self.startup.registered_new_node()
                self.last_sent = node["status"]
                self.inp.volumes_reported(list(node["status"].get("volumesInUse") or []))
                log.info("Successfully registered node %s", self.inp.name)
                break
            except APIError as err:
                if err.already_exists:
                    try:
                        self.node = await self._adopt(node)
                        log.info("Node %s was previously registered", self.inp.name)
                        break
                    except Exception as err2:  # registration retries until it works
                        log.warning("Unable to reconcile existing node %s: %s", self.inp.name, err2)
                else:
                    log.warning(
                        "Unable to register node %s with API server: %s", self.inp.name, err
                    )
            except Exception as err:  # registration retries until it works
                log.warning("Unable to register node %s with API server: %s", self.inp.name, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 7.0)
        self.last_report = time.monotonic()
        self.registered.set()
        return self.node

    async def _adopt(self, wanted: Node) -> dict[str, Any]:
        existing = await self.client.get(self.path)
        labels = existing.get("metadata", {}).get("labels", {}) or {}
        patch: dict[str, Any] = {}
        want_labels = wanted["metadata"]["labels"]
        fix = {k: want_labels[k] for k in _DEFAULT_LABELS if labels.get(k) != want_labels.get(k)}
        fix.update({k: v for k, v in self.inp.node_labels.items() if labels.get(k) != v})
        if fix:
            patch["metadata"] = {"labels": fix}
        ann = existing.get("metadata", {}).get("annotations", {}) or {}
        key = "volumes.kubernetes.io/controller-managed-attach-detach"
        if ann.get(key) != "true":
            patch.setdefault("metadata", {})["annotations"] = {key: "true"}
        if patch:
            existing = await self.client.patch(self.path, patch)
        # The status is ours: replace it with the current one.
        return await self._patch_status(compute_status(self.inp, existing.get("status")))

    async def _patch_status(self, status: NodeStatus) -> dict[str, Any]:
        # A JSON merge patch replaces each list wholesale, which is what the owner
        # of these fields wants; fields set by controllers are left alone.
        node = await self.client.patch(self.path + "/status", {"status": status})
        # Compare future computations with what we sent, not with the server's
        # canonical form (it drops empty fields and rewrites quantities).
        self.last_sent = status
        self.inp.volumes_reported(list(status.get("volumesInUse") or []))
        self.patches += 1
        self.last_report = time.monotonic()
        self._note_ready(status)
        if self.startup is not None and _ready(node):
            self.startup.node_ready()
        return dict(node)

    def _note_ready(self, status: NodeStatus) -> None:
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        state = ready["status"] if ready else None
        if state != self._last_ready and self.recorder is not None and self.node is not None:
            reason = "NodeReady" if state == "True" else "NodeNotReady"
            self.recorder.event(
                self.node_ref(), "Normal", reason, f"Node {self.inp.name} status is now: {reason}"
            )
        self._last_ready = state

    @property
    def node(self) -> dict[str, Any] | None:
        return self._node.node

    @node.setter
    def node(self, node: dict[str, Any] | None) -> None:
        self._node.node = node

    def uid(self) -> str | None:
        """The Node's UID once it is registered."""
        return self._node.uid()

    def node_ref(self) -> ObjectReference:
        uid = (self.node or {}).get("metadata", {}).get("uid", self.inp.name)
        return {"kind": "Node", "name": self.inp.name, "uid": uid, "apiVersion": "v1"}

    async def sync_once(self) -> bool:
        """tryUpdateNodeStatus: returns True when a patch was sent."""
        assert self.node is not None
        watched = self.current()
        new = compute_status(self.inp, (watched or self.node).get("status"))
        due = time.monotonic() - self.last_report >= self.inp.config.node_status_report_frequency
        before = self.last_sent if self.last_sent is not None else self.node.get("status", {})
        if not due and not status_changed(before, new):
            return False
        try:
            self.node = await self._patch_status(new)
        except APIError as err:
            if err.not_found:
                log.warning("Node %s was deleted; registering it again", self.inp.name)
                self.registered.clear()
                await self.register()
                return True
            raise
        return True

    async def _wait(self, stop: asyncio.Event, period: float) -> bool:
        """Until the next report is due: the period, a wake, or sooner when an
        input is urgent (a CSI staging waits to be reported in use); True on stop."""
        waits: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self.wake.wait()),
        ]
        if self.inp.urgent is not None:
            waits.append(asyncio.ensure_future(self.inp.urgent()))
        try:
            await asyncio.wait(waits, timeout=period, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self.wake.clear()
        return stop.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        if not self.registered.is_set():
            await self.register()
        period = self.inp.config.node_status_update_frequency
        while not stop.is_set():
            if await self._wait(stop, period):
                return
            try:
                await self.sync_once()
            except Exception as err:  # the status loop must outlive one failed update
                # Upstream retries 5 times within one period; the next tick retries anyway.
                log.warning("Error updating node status, will retry: %s", err)
