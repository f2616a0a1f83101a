"""PodConfig: merges pod sources into one stream of updates (pkg/kubelet/config/config.go).

Each source sends full snapshots; PodConfig keeps what each source last said
and turns the difference into ADD / UPDATE / REMOVE / DELETE / RECONCILE.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass

import orjson

from kubelet.types import CONFIG_SEEN, Pod, full_name, uid

log = logging.getLogger(__name__)


class Op(enum.Enum):
    ADD = "ADD"
    UPDATE = "UPDATE"
    REMOVE = "REMOVE"  # gone from its source: kill it and forget it
    DELETE = "DELETE"  # graceful deletion requested (deletionTimestamp set)
    RECONCILE = "RECONCILE"  # only the status changed


@dataclass
class PodUpdate:
    op: Op
    pods: list[Pod]
    source: str


def _identity(pod: Pod) -> bytes:
    """What makes a pod different for the kubelet: everything but status and seen-time."""
    md = dict(pod["metadata"])
    ann = dict(md.get("annotations") or {})
    ann.pop(CONFIG_SEEN, None)
    md["annotations"] = ann
    md.pop("resourceVersion", None)
    md.pop("managedFields", None)
    return orjson.dumps([md, pod.get("spec")], option=orjson.OPT_SORT_KEYS)


class PodConfig:
    def __init__(self) -> None:
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self._pods: dict[str, dict[str, Pod]] = {}
        self._ident: dict[str, bytes] = {}
        self.sources_seen: set[str] = set()

    def all_pods(self) -> list[Pod]:
        return [p for pods in self._pods.values() for p in pods.values()]

    def set_pods(self, source: str, pods: list[Pod]) -> None:
        """A full snapshot from one source."""
        old = self._pods.get(source, {})
        taken = {
            full_name(p): uid(p) for s, ps in self._pods.items() if s != source for p in ps.values()
        }
        new: dict[str, Pod] = {}
        for pod in pods:
            u, fn = uid(pod), full_name(pod)
            if u in new:
                continue
            if taken.get(fn, u) != u:
                log.warning(
                    "Detected duplicate pod name %s from source %s; ignoring it", fn, source
                )
                continue
            taken[fn] = u
            new[u] = pod
        adds, updates, removes, deletes, reconciles = [], [], [], [], []
        for u, pod in new.items():
            ident = _identity(pod)
            if u not in old:
                adds.append(pod)
            elif ident != self._ident.get(u):
                if pod["metadata"].get("deletionTimestamp") and not old[u]["metadata"].get(
                    "deletionTimestamp"
                ):
                    deletes.append(pod)
                else:
                    updates.append(pod)
            elif pod.get("status") != old[u].get("status"):
                reconciles.append(pod)
            self._ident[u] = ident
        for u, pod in old.items():
            if u not in new:
                removes.append(pod)
                self._ident.pop(u, None)
        self._pods[source] = new
        first = source not in self.sources_seen
        self.sources_seen.add(source)
        for op, items in (
            (Op.REMOVE, removes),
            (Op.ADD, adds),
            (Op.UPDATE, updates),
            (Op.DELETE, deletes),
            (Op.RECONCILE, reconciles),
        ):
            if items or (first and op is Op.ADD):
                self.updates.put_nowait(PodUpdate(op, items, source))
