"""ConfigMaps and Secrets for the pods on this node (pkg/kubelet/configmap,
pkg/kubelet/secret and util/manager upstream).

The interface is fixed here; the watch-based implementation (one watch per
object that some pod on the node references, shared by all those pods) lives
beside it. Env building and the configMap/secret/projected volume plugins
read objects only through ObjectGetter.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient
from kubelet.types import Pod, all_containers
from kubelet.util.clock import REAL_CLOCK, Clock


class ObjectNotFoundError(Exception):
    """The object does not exist (upstream's `configmap "x" not found`)."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f'{kind} "{name}" not found')
        self.kind, self.namespace, self.name = kind, namespace, name


class ObjectGetter(Protocol):
    """One kind of object (configmaps or secrets)."""

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The object as an API dict. Raises ObjectNotFoundError when it does
        not exist, or one of OBJECT_UNAVAILABLE (with a message fit for an
        event) when it cannot be had now (no API client, not registered, the
        watch not synced in time)."""
        ...


class PodObjectManager(ObjectGetter, Protocol):
    """An ObjectGetter that knows which pods reference which objects, so it
    watches only those (RegisterPod/UnregisterPod upstream)."""

    def register_pod(self, pod: Pod) -> None: ...

    def unregister_pod(self, pod: Pod) -> None: ...


# ---------------------------------------------------------------------------
# The watch-based implementation (util/manager/watch_based_manager.go).

log = logging.getLogger(__name__)

CONFIGMAP = "configmap"
SECRET = "secret"
_RESOURCE = {CONFIGMAP: "configmaps", SECRET: "secrets"}
# How long get() waits for a new watch's first list, as upstream (1 s).
SYNC_TIMEOUT = 1.0
# A watch nobody read for 5 resync intervals is paused (objects referenced
# only from env are read once at container start); the next get() resumes it.
IDLE_FACTOR = 5
MIN_IDLE = 60.0
RECYCLE_PERIOD = 60.0
# Upstream raises the watch timeout for these reflectors to 30 min (x1-2 jitter).
MIN_WATCH_TIMEOUT = 1800.0


class StandaloneError(Exception):
    """No API client: configMaps and secrets cannot be had (standalone mode)."""


# What ObjectGetter.get raises when the object cannot be had now: no API
# client, the object not registered by any pod, the watch not synced in time.
OBJECT_UNAVAILABLE: tuple[type[Exception], ...] = (StandaloneError, LookupError, TimeoutError)
# Everything ObjectGetter.get raises: missing, or not to be had now.
OBJECT_GET_ERRORS: tuple[type[Exception], ...] = (ObjectNotFoundError, *OBJECT_UNAVAILABLE)


def configmap_names(pod: Pod) -> set[str]:
    """Every configMap the pod references (VisitPodConfigmapNames upstream)."""
    names: set[str] = set()
    for c in all_containers(pod):
        for env_from in c.get("envFrom") or []:
            if (cm_ref := env_from.get("configMapRef")) is not None:
                names.add(cm_ref.get("name") or "")
        for env in c.get("env") or []:
            if (cm_key := (env.get("valueFrom") or {}).get("configMapKeyRef")) is not None:
                names.add(cm_key.get("name") or "")
    for vol in pod["spec"].get("volumes") or []:
        names.add((vol.get("configMap") or {}).get("name") or "")
        for src in (vol.get("projected") or {}).get("sources") or []:
            names.add((src.get("configMap") or {}).get("name") or "")
    names.discard("")
    return names


# In-tree volume sources that name a secret (the kubelet hands them to the plugin).
_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos")


def secret_names(pod: Pod) -> set[str]:
    """Every secret the pod references (VisitPodSecretNames upstream)."""
    spec = pod["spec"]
    names = {s.get("name") or "" for s in spec.get("imagePullSecrets") or []}
    for c in all_containers(pod):
        for env_from in c.get("envFrom") or []:
            if (secret_ref := env_from.get("secretRef")) is not None:
                names.add(secret_ref.get("name") or "")
        for env in c.get("env") or []:
            if (secret_key := (env.get("valueFrom") or {}).get("secretKeyRef")) is not None:
                names.add(secret_key.get("name") or "")
    for vol in spec.get("volumes") or []:
        names.add((vol.get("secret") or {}).get("secretName") or "")
        for src in (vol.get("projected") or {}).get("sources") or []:
            names.add((src.get("secret") or {}).get("name") or "")
        if (csi := vol.get("csi")) is not None:
            names.add((csi.get("nodePublishSecretRef") or {}).get("name") or "")
        # Volume types this kubelet has no plugin for, read as the JSON they came as.
        raw: Mapping[str, Any] = vol
        names.add((raw.get("azureFile") or {}).get("secretName") or "")
        for kind in _SECRET_REF_VOLUMES:
            names.add(((raw.get(kind) or {}).get("secretRef") or {}).get("name") or "")
    names.discard("")
    return names


def is_immutable(obj: dict[str, Any]) -> bool:
    return obj.get("immutable") is True


@dataclass(eq=False)
class _Watched:
    """One object that some registered pod references, and its watch."""

    namespace: str
    name: str
    refs: int = 0
    obj: dict[str, Any] | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event | None = None  # set: this run of the watch must end
    task: asyncio.Task[None] | None = None
    reflector: Reflector | None = None
    generation: int = 0  # handlers of an older run ignore what they get
    last_access: float = 0.0
    immutable: bool = False

    @property
    def running(self) -> bool:
        return self.stop is not None and not self.stop.is_set()


class WatchingObjectManager:
    """configMaps or secrets of the pods on this node, each watched alone
    (list+watch with fieldSelector metadata.name=<name> in its namespace) for
    as long as a registered pod references it: 5,000 pods sharing one
    configMap make one watch.

    register_pod/unregister_pod never block (they run in the pod config
    path); a new watch starts in the background and the first get() waits
    for its first list, up to SYNC_TIMEOUT. Objects marked immutable stop
    being watched once read; their last copy is served from then on.
    get() returns the cached dict itself: callers must not modify it.
    """

    def __init__(
        self,
        kind: str,
        client: APIClient | None,
        resync_interval: float = 60.0,
        clock: Clock = REAL_CLOCK,
        sync_timeout: float = SYNC_TIMEOUT,
        watch_timeout: Callable[[], float] | None = None,
    ) -> None:
        if kind not in _RESOURCE:
            raise ValueError(f"unknown kind {kind!r}")
        self.kind = kind
        self.client = client
        self.clock = clock
        self.sync_timeout = sync_timeout
        self.max_idle = max(resync_interval * IDLE_FACTOR, MIN_IDLE)
        self._watch_timeout = watch_timeout or (lambda: MIN_WATCH_TIMEOUT * (1.0 + random.random()))
        self._names: Callable[[Pod], set[str]] = (
            configmap_names if kind == CONFIGMAP else secret_names
        )
        self._items: dict[tuple[str, str], _Watched] = {}
        # pod key -> (namespace, names it references when registered)
        self._pods: dict[tuple[str, str, str], tuple[str, frozenset[str]]] = {}
        self._recycler: asyncio.Task[None] | None = None
        self._closed = False

    # -- registration ------------------------------------------------------

    def register_pod(self, pod: Pod) -> None:
        if self.client is None:
            return
        md = pod.get("metadata") or {}
        ns = md.get("namespace") or ""
        key = (ns, md.get("name") or "", md.get("uid") or "")
        names = frozenset(self._names(pod))
        prev = self._pods.get(key)
        self._pods[key] = (ns, names)
        old = prev[1] if prev else frozenset()
        # New references first, so an object kept across an update keeps its watch.
        for name in names - old:
            self._add_ref(ns, name)
        for name in old - names:
            self._del_ref(ns, name)

    def unregister_pod(self, pod: Pod) -> None:
        md = pod.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "", md.get("uid") or "")
        prev = self._pods.pop(key, None)
        if prev is not None:
            for name in prev[1]:
                self._del_ref(prev[0], name)

    def _add_ref(self, ns: str, name: str) -> None:
        item = self._items.get((ns, name))
        if item is None:
            item = _Watched(ns, name, last_access=self.clock.monotonic())
            self._items[(ns, name)] = item
            self._start(item)
        item.refs += 1

    def _del_ref(self, ns: str, name: str) -> None:
        item = self._items.get((ns, name))
        if item is None:
            return
        item.refs -= 1
        if item.refs <= 0:
            # As upstream: the last reference gone, the watch goes at once.
            self._stop(item)
            del self._items[(ns, name)]

    # -- the watches -------------------------------------------------------

    def _start(self, item: _Watched) -> None:
        if self._closed or self.client is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # registered outside the loop: the first get() starts it
        item.generation += 1
        gen = item.generation
        stop = asyncio.Event()
        item.stop = stop

        async def on_list(objs: list[dict[str, Any]]) -> None:
            if item.generation != gen:
                return
            item.obj = next(
                (o for o in objs if (o.get("metadata") or {}).get("name") == item.name), None
            )
            item.synced.set()

        async def on_event(etype: str, obj: dict[str, Any]) -> None:
            if item.generation != gen:
                return
            if etype == "DELETED":
                item.obj = None
            elif etype in ("ADDED", "MODIFIED"):
                item.obj = obj

        item.reflector = Reflector(
            self.client,
            f"/api/v1/namespaces/{item.namespace}/{_RESOURCE[self.kind]}",
            {"fieldSelector": f"metadata.name={item.name}"},
            on_list,
            on_event,
            watch_timeout=self._watch_timeout(),
        )
        item.task = asyncio.create_task(
            item.reflector.run(stop), name=f"{self.kind}-watch-{item.namespace}/{item.name}"
        )
        if self._recycler is None or self._recycler.done():
            self._recycler = asyncio.create_task(self._recycle_loop(), name=f"{self.kind}-idle")

    def _stop(self, item: _Watched) -> bool:
        if not item.running:
            return False
        assert item.stop is not None
        item.stop.set()
        item.generation += 1
        if not item.immutable:
            # A resumed watch must list again before get() trusts the copy.
            item.synced.clear()
        return True

    def _restart_if_needed(self, item: _Watched) -> None:
        if item.immutable or item.running or self._closed:
            return
        self._start(item)

    def recycle_idle(self) -> int:
        """Pause the watches that no get() used for max_idle; return how many."""
        now = self.clock.monotonic()
        stopped = 0
        for item in self._items.values():
            if item.running and item.synced.is_set() and now - item.last_access > self.max_idle:
                if self._stop(item):
                    log.debug(
                        "%s %s/%s not read for %.0fs: watch paused",
                        self.kind,
                        item.namespace,
                        item.name,
                        self.max_idle,
                    )
                    stopped += 1
        return stopped

    async def _recycle_loop(self) -> None:
        while self._items and not self._closed:
            await asyncio.sleep(RECYCLE_PERIOD)
            self.recycle_idle()

    @property
    def watches(self) -> int:
        """Watches running now (for tests and metrics)."""
        return sum(1 for item in self._items.values() if item.running)

    # -- reads -------------------------------------------------------------

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        if self.client is None:
            raise StandaloneError(
                f"couldn't get {self.kind} {namespace}/{name}, no kubeClient defined"
            )
        item = self._items.get((namespace, name))
        if item is None:
            raise LookupError(f'object "{namespace}"/"{name}" not registered')
        # Recorded whether or not the read succeeds, so a slow list is not
        # paused as idle while someone waits for it.
        item.last_access = self.clock.monotonic()
        self._restart_if_needed(item)
        if not item.synced.is_set():
            try:
                await asyncio.wait_for(item.synced.wait(), self.sync_timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"failed to sync {self.kind} cache: timed out waiting for the condition"
                ) from None
        obj = item.obj
        if obj is None:
            raise ObjectNotFoundError(self.kind, namespace, name)
        if is_immutable(obj) and not item.immutable:
            item.immutable = True
            if self._stop(item):
                log.debug("%s %s/%s is immutable: watch stopped", self.kind, namespace, name)
        return obj

    async def close(self) -> None:
        """Stop every watch (kubelet shutdown)."""
        self._closed = True
        tasks = [i.task for i in self._items.values() if i.task is not None]
        for item in self._items.values():
            self._stop(item)
        if self._recycler is not None:
            self._recycler.cancel()
            tasks.append(self._recycler)
        await asyncio.gather(*tasks, return_exceptions=True)
