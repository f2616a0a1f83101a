"""ConfigMaps and Secrets for the pods on this node (pkg/kubelet/configmap,
pkg/kubelet/secret and util/manager upstream).

The interface is fixed here; the watch-based implementation (one watch per
object that some pod on the node references, shared by all those pods) lives
beside it. Env building and the configMap/secret/projected volume plugins
read objects only through ObjectGetter.
"""

from __future__ import annotations

from typing import Any, Protocol

Pod = dict[str, Any]


class ObjectNotFoundError(Exception):
    """The object does not exist (upstream's `configmap "x" not found`)."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f'{kind} "{name}" not found')
        self.kind, self.namespace, self.name = kind, namespace, name


class ObjectGetter(Protocol):
    """One kind of object (configmaps or secrets)."""

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The object as an API dict. Raises ObjectNotFoundError when it does
        not exist, or another exception (with a message fit for an event) when
        it cannot be had now (no API client, API server unreachable)."""
        ...


class PodObjectManager(ObjectGetter, Protocol):
    """An ObjectGetter that knows which pods reference which objects, so it
    watches only those (RegisterPod/UnregisterPod upstream)."""

    def register_pod(self, pod: Pod) -> None: ...

    def unregister_pod(self, pod: Pod) -> None: ...
