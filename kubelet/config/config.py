"""PodConfig: merges pod sources into one stream of updates (pkg/kubelet/config/config.go).

Each source sends full snapshots; PodConfig keeps what each source last said
and turns the difference into ADD / UPDATE / REMOVE / DELETE / RECONCILE.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
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
    """What makes a pod different for the kubelet: everything but status and
    seen-time, as a 128-bit digest (the serialised form is kilobytes per pod,
    and only its equality is ever asked)."""
    md: dict[str, object] = dict(pod["metadata"])
    ann = dict(pod["metadata"].get("annotations") or {})
    ann.pop(CONFIG_SEEN, None)
    md["annotations"] = ann
    md.pop("resourceVersion", None)
    md.pop("managedFields", None)
    raw = orjson.dumps([md, pod.get("spec")], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(raw, digest_size=16).digest()


class PodConfig:
    def __init__(self) -> None:
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self._pods: dict[str, dict[str, Pod]] = {}
        self._ident: dict[str, bytes] = {}
        # source -> full name -> UID. Names are unique within a source only, as
        # upstream: a static pod and its mirror pod from the API share a name.
        self._names: dict[str, dict[str, str]] = {}
        self.sources_seen: set[str] = set()

    def all_pods(self) -> list[Pod]:
        return [p for pods in self._pods.values() for p in pods.values()]

    def _classify(self, old: Pod | None, pod: Pod) -> Op | None:
        u = uid(pod)
        ident = _identity(pod)
        prev = self._ident.get(u)
        self._ident[u] = ident
        if old is None:
            return Op.ADD
        if ident != prev:
            if pod["metadata"].get("deletionTimestamp") and not old["metadata"].get(
                "deletionTimestamp"
            ):
                return Op.DELETE
            return Op.UPDATE
        # The same spec as the version before: share it, so that the version a
        # pod worker still holds and the API's newest keep one copy between them.
        if "spec" in old:
            pod["spec"] = old["spec"]
        if pod.get("status") != old.get("status"):
            return Op.RECONCILE
        return None

    def _name_free(self, pod: Pod, source: str) -> bool:
        fn, u = full_name(pod), uid(pod)
        names = self._names.setdefault(source, {})
        if names.get(fn, u) != u:
            log.warning("Detected duplicate pod name %s from source %s; ignoring it", fn, source)
            return False
        names[fn] = u
        return True

    def _forget(self, source: str, pod: Pod) -> None:
        u = uid(pod)
        self._ident.pop(u, None)
        names = self._names.get(source, {})
        if names.get(full_name(pod)) == u:
            del names[full_name(pod)]

    def set_pods(self, source: str, pods: list[Pod]) -> None:
        """A full snapshot from one source."""
        old = self._pods.get(source, {})
        self._names[source] = {}  # rebuilt from the snapshot below
        new: dict[str, Pod] = {}
        for pod in pods:
            if uid(pod) in new or not self._name_free(pod, source):
                continue
            new[uid(pod)] = pod
        by_op: dict[Op, list[Pod]] = {op: [] for op in Op}
        for u, pod in new.items():
            op = self._classify(old.get(u), pod)
            if op is not None:
                by_op[op].append(pod)
        for u, pod in old.items():
            if u not in new:
                by_op[Op.REMOVE].append(pod)
                self._ident.pop(u, None)
        self._pods[source] = new
        first = source not in self.sources_seen
        self.sources_seen.add(source)
        for op in (Op.REMOVE, Op.ADD, Op.UPDATE, Op.DELETE, Op.RECONCILE):
            if by_op[op] or (first and op is Op.ADD):
                self.updates.put_nowait(PodUpdate(op, by_op[op], source))

    def upsert(self, source: str, pod: Pod) -> None:
        """One pod added or changed (a watch event): O(1), unlike a snapshot."""
        pods = self._pods.setdefault(source, {})
        old = pods.get(uid(pod))
        if not self._name_free(pod, source):
            return
        op = self._classify(old, pod)
        pods[uid(pod)] = pod
        self.sources_seen.add(source)
        if op is not None:
            self.updates.put_nowait(PodUpdate(op, [pod], source))

    def remove(self, source: str, pod: Pod) -> None:
        old = self._pods.get(source, {}).pop(uid(pod), None)
        if old is None:
            return
        self._forget(source, old)
        self.updates.put_nowait(PodUpdate(Op.REMOVE, [old], source))

    def mark_seen(self, source: str) -> None:
        """The source has said everything it has (an empty first list, say)."""
        if source not in self.sources_seen:
            self.sources_seen.add(source)
            self.updates.put_nowait(PodUpdate(Op.ADD, [], source))
