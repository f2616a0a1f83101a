"""Mirror pods: the API server's view of static pods (pkg/kubelet/pod/mirror_client.go).

A mirror pod is a copy of a static pod with the annotation
kubernetes.io/config.mirror set to the static pod's hash, owned by the Node
(NodeRestriction admits a node's mirror pods only with that owner reference).
The kubelet never runs a mirror pod; it recreates it when it is missing or
out of date and deletes it when its static pod goes away.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from kubelet.client.rest import APIClient, APIError
from kubelet.types import CONFIG_HASH, CONFIG_MIRROR, Pod, name, namespace, pod_annotations

log = logging.getLogger(__name__)


def is_mirror(pod: Pod) -> bool:
    return CONFIG_MIRROR in pod_annotations(pod)


def static_hash(pod: Pod) -> str:
    return str(pod_annotations(pod).get(CONFIG_HASH, ""))


def mirror_matches(static: Pod, mirror: Pod) -> bool:
    """The mirror reflects this version of the static pod and is not being deleted."""
    return pod_annotations(mirror).get(CONFIG_MIRROR) == static_hash(static) and not mirror[
        "metadata"
    ].get("deletionTimestamp")


class NodeNotRegistered(Exception):
    """The mirror pod's owner, the Node, is not known yet: created on a later sync."""


class MirrorClient:
    def __init__(self, client: APIClient, node_name: str, node_uid: Callable[[], str | None]):
        self.client = client
        self.node_name = node_name
        self.node_uid = node_uid
        self.created = 0
        self.deleted = 0

    def _build(self, static: Pod) -> dict[str, Any]:
        md = static["metadata"]
        ann = dict(md.get("annotations") or {})
        ann[CONFIG_MIRROR] = static_hash(static)
        meta: dict[str, Any] = {
            "name": md["name"],
            "namespace": namespace(static),
            "labels": dict(md.get("labels") or {}),
            "annotations": ann,
        }
        node_uid = self.node_uid()
        if node_uid:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node_name,
                    "uid": node_uid,
                    "controller": True,
                }
            ]
        spec = copy.deepcopy(static["spec"])
        spec["nodeName"] = self.node_name
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    async def create(self, static: Pod) -> None:
        if not self.node_uid():
            raise NodeNotRegistered("the Node is not registered yet; mirror pod creation waits")
        try:
            await self.client.create(
                f"/api/v1/namespaces/{namespace(static)}/pods", self._build(static)
            )
            self.created += 1
            log.info("Created mirror pod %s/%s", namespace(static), name(static))
        except APIError as err:
            if not err.already_exists:
                raise

    async def delete(self, mirror: Pod) -> None:
        md = mirror["metadata"]
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": md.get("uid")},
        }
        try:
            await self.client.delete(
                f"/api/v1/namespaces/{namespace(mirror)}/pods/{name(mirror)}", options
            )
            self.deleted += 1
            log.info("Deleted mirror pod %s/%s", namespace(mirror), name(mirror))
        except APIError as err:
            if not (err.not_found or err.conflict):
                raise
