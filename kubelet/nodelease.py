"""The node Lease heartbeat (pkg/kubelet/nodelease, component-helpers lease controller).

The Lease kube-node-lease/<node> is renewed every leaseDuration/4 with the
heartbeat client (no rate limit, short timeout); failures back off from 200ms
to 7s, and a renewal conflict re-reads the Lease.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any

from kubelet.client.rest import APIClient, APIError

log = logging.getLogger(__name__)

NAMESPACE = "kube-node-lease"
RENEW_FRACTION = 0.25


def micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeLeaseController:
    def __init__(
        self,
        client: APIClient,
        node_name: str,
        lease_duration_seconds: int,
        node_uid: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.duration = lease_duration_seconds
        self.node_uid = node_uid  # callable returning the Node's UID once registered
        self.lease: dict[str, Any] | None = None
        self.renewals = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{self.node_name}"

    def _spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": self.duration,
            "renewTime": micro_time(),
        }

    def _owner(self) -> list[dict[str, Any]]:
        uid = self.node_uid()
        if not uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid}]

    async def ensure(self) -> None:
        try:
            self.lease = await self.client.get(self.path)
        except APIError as err:
            if not err.not_found:
                raise
            lease: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": NAMESPACE},
                "spec": self._spec(),
            }
            owners = self._owner()
            if owners:
                lease["metadata"]["ownerReferences"] = owners
            self.lease = await self.client.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", lease
            )

    async def renew(self) -> None:
        if self.lease is None:
            await self.ensure()
            self.renewals += 1
            return
        assert self.lease is not None
        lease = dict(self.lease)
        lease["spec"] = dict(lease.get("spec") or {}, **self._spec())
        meta = dict(lease["metadata"])
        if not meta.get("ownerReferences"):
            owners = self._owner()
            if owners:
                meta["ownerReferences"] = owners
        lease["metadata"] = meta
        try:
            self.lease = await self.client.update(self.path, lease)
        except APIError as err:
            if err.conflict or err.not_found:
                self.lease = None  # re-read or recreate on the next try
            raise
        self.renewals += 1

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.duration * RENEW_FRACTION
        backoff = 0.2
        while not stop.is_set():
            try:
                await self.renew()
                backoff = 0.2
                wait = interval
            except Exception as err:  # the heartbeat must go on: retried with back-off
                log.warning(
                    "Failed to update lease %s, will retry in %.1fs: %s", self.path, backoff, err
                )
                wait = backoff
                backoff = min(backoff * 2, 7.0)
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                pass
