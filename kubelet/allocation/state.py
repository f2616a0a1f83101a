"""The allocation checkpoints (pkg/kubelet/allocation/state): per pod, the
resources of each container, in upstream's file format so either kubelet
reads the other's files.

The file is `{"data": <JSON text>, "checksum": N}` where the data is the JSON
of `{"entries": {uid: {"ContainerResources": {name: ResourceRequirements}}}}`
and the checksum is that of the data string (checkpointmanager/checksum).
Quantities are kept in their canonical text, as Go's encoder writes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from kubelet.checkpointmanager import (
    CheckpointError,
    CheckpointStore,
    CorruptCheckpointError,
    clean_string,
    go_map,
    go_object,
    go_string,
    go_uint,
    load_json,
    restore_checkpoint,
    struct_fields,
)
from kubelet.checkpointmanager.checksum import GoScalar, checksum
from kubelet.core_v1 import ResourceClaimRef, ResourceRequirements
from kubelet.util.quantity import (
    cpu_millis,
    format_quantity,
    parse_quantity,
    quantity_format,
    to_bytes,
)

log = logging.getLogger(__name__)

ALLOCATED_FILE = "allocated_pods_state"
ACTUATED_FILE = "actuated_pods_state"


class Requirements(TypedDict, total=False):
    """v1.ResourceRequirements as the checkpoint holds it."""

    limits: dict[str, str]
    requests: dict[str, str]
    claims: list[dict[str, str]]


# Container name -> its resources (PodResourceInfo.ContainerResources).
PodResources = dict[str, Requirements]


def as_api(r: Requirements) -> ResourceRequirements:
    """A checkpointed container's resources as the pod spec holds them."""
    out: ResourceRequirements = {}
    if "limits" in r:
        out["limits"] = dict(r["limits"])
    if "requests" in r:
        out["requests"] = dict(r["requests"])
    if "claims" in r:
        out["claims"] = [
            ResourceClaimRef(name=c.get("name", ""), request=c.get("request", ""))
            if c.get("request")
            else ResourceClaimRef(name=c.get("name", ""))
            for c in r["claims"]
        ]
    return out


def canonical(q: str | int | float) -> str:
    """A quantity's canonical text (what Quantity.MarshalJSON writes)."""
    return format_quantity(parse_quantity(q), quantity_format(q))


def normalize(r: Any) -> Requirements:
    """A container's `resources` with canonical quantities and empty parts dropped."""
    out: Requirements = {}
    if not isinstance(r, dict):
        return out
    for part in ("limits", "requests"):
        items = r.get(part) or {}
        if items:
            out[part] = {str(k): canonical(v) for k, v in items.items()}
    claims = r.get("claims")
    if claims:
        out["claims"] = [
            {k: str(v) for k, v in c.items() if k in ("name", "request") and v} for c in claims
        ]
    return out


@dataclass(frozen=True)
class Resources:
    """cpu in millis, memory in bytes; 0 when not set (containerResources)."""

    cpu_limit: int = 0
    cpu_request: int = 0
    memory_limit: int = 0
    memory_request: int = 0


def resources_of(r: Requirements | ResourceRequirements | None) -> Resources:
    """The cpu and memory values of a container's resources, comparable."""
    req: Mapping[str, object] = (r or {}).get("requests") or {}
    lim: Mapping[str, object] = (r or {}).get("limits") or {}
    return Resources(
        cpu_millis(str(lim.get("cpu", 0))),
        cpu_millis(str(req.get("cpu", 0))),
        to_bytes(str(lim.get("memory", 0))),
        to_bytes(str(req.get("memory", 0))),
    )


def _encode_requirements(r: Requirements) -> str:
    r = normalize(r)
    parts = []
    for part, items in (("limits", r.get("limits")), ("requests", r.get("requests"))):
        if items:  # in the struct's field order
            parts.append((part, go_map({k: go_string(v) for k, v in items.items()})))
    claims = r.get("claims")
    if claims:
        parts.append(
            (
                "claims",
                "["
                + ",".join(
                    go_object((k, go_string(c[k])) for k in ("name", "request") if c.get(k))
                    for c in claims
                )
                + "]",
            )
        )
    return go_object(parts)


def _entry(pod_uid: str, containers: PodResources) -> str:
    """One pod's `"uid":{"ContainerResources":{...}}` member of the entries map."""
    encoded = go_map({n: _encode_requirements(r) for n, r in containers.items()})
    return f"{go_string(pod_uid)}:{go_object([('ContainerResources', encoded)])}"


def _data_of(entries: Mapping[str, str]) -> str:
    """json.Marshal(PodResourceCheckpointInfo) from each pod's encoded member
    (map keys sorted as Go sorts them; entries is omitempty)."""
    if not entries:
        return "{}"
    return '{"entries":{' + ",".join(entries[u] for u in sorted(entries)) + "}}"


def _file_of(data: str) -> bytes:
    sum_ = checksum(GoScalar("string", data))
    return go_object([("data", go_string(data)), ("checksum", str(sum_))]).encode()


def encode_data(entries: dict[str, PodResources]) -> str:
    return _data_of({u: _entry(u, c) for u, c in entries.items()})


def encode(entries: dict[str, PodResources]) -> bytes:
    return _file_of(encode_data(entries))


def _decode_list(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise CheckpointError(f"{where}: want an object")
    out = {}
    for k, q in v.items():
        q = clean_string(q, f"{where}[{k}]")
        try:
            out[k] = canonical(q)
        except (ValueError, ArithmeticError):
            raise CheckpointError(
                f"{where}[{k}]: quantities must match the regular expression"
            ) from None
    return out


def _decode_requirements(v: Any, where: str) -> Requirements:
    f = struct_fields(v, ("limits", "requests", "claims"), where)
    out: Requirements = {}
    for part in ("limits", "requests"):
        items = _decode_list(f.get(part), f"{where}.{part}")
        if items:
            out[part] = items
    if f.get("claims"):
        if not isinstance(f["claims"], list):
            raise CheckpointError(f"{where}.claims: want a list")
        out["claims"] = [
            {
                k: clean_string(x, where)
                for k, x in struct_fields(c, ("name", "request"), where).items()
            }
            for c in f["claims"]
        ]
    return out


def decode(blob: bytes) -> dict[str, PodResources]:
    """GetCheckpoint + GetPodResourceCheckpointInfo: the checksum is verified
    over the data string before the data is read."""
    outer = struct_fields(load_json(blob), ("data", "checksum"), "checkpoint")
    data = clean_string(outer.get("data", ""), "data")
    want = go_uint(outer.get("checksum", 0), "checksum")
    got = checksum(GoScalar("string", data))
    if got != want:
        raise CorruptCheckpointError(got, want)
    info = struct_fields(load_json(data.encode()), ("entries",), "data")
    entries = info.get("entries") or {}
    if not isinstance(entries, dict):
        raise CheckpointError("entries: want an object")
    out: dict[str, PodResources] = {}
    for u, pod in entries.items():
        f = struct_fields(pod, ("ContainerResources",), f"entries[{u}]")
        containers = f.get("ContainerResources") or {}
        if not isinstance(containers, dict):
            raise CheckpointError(f"entries[{u}].ContainerResources: want an object")
        out[u] = {n: _decode_requirements(r, f"entries[{u}][{n}]") for n, r in containers.items()}
    return out


class AllocationState:
    """One checkpoint (allocated or actuated), written through on each change
    (stateCheckpoint); nothing is written when the content did not change.

    Each pod's part of the file is encoded when that pod changes and kept, so
    a write joins the parts rather than encoding every pod again: at 1,000
    pods re-encoding all of them per admission was most of the start-up CPU.
    On the event loop the changes of one loop pass are written together, in a
    callback queued behind the change: on disk before the loop handles any
    reply that arrives later, so before the pod's sandbox is even answered,
    let alone its containers created (a crash in between is a crash before
    the change)."""

    def __init__(self, store: CheckpointStore | None, key: str) -> None:
        self.store, self.key = store, key
        self._pods: dict[str, PodResources] = {}
        self._encoded: dict[str, str] = {}  # pod UID -> its encoded entry
        self._last = ""  # the data last written (or read)
        self._write_queued = False

    @classmethod
    def restore(cls, store: CheckpointStore, key: str) -> AllocationState:
        """NewStateCheckpoint: ValueError, naming the file, when it is corrupt."""
        st = cls(store, key)

        def load(blob: bytes) -> None:
            st._pods = decode(blob)
            st._encoded = {u: _entry(u, c) for u, c in st._pods.items()}
            st._last = _data_of(st._encoded)

        restore_checkpoint(store, key, "pod resource information", load)
        return st

    def get_pod(self, pod_uid: str) -> PodResources | None:
        return self._pods.get(pod_uid)

    def get_container(self, pod_uid: str, container: str) -> Requirements | None:
        return self._pods.get(pod_uid, {}).get(container)

    def pods(self) -> set[str]:
        return set(self._pods)

    def set_pod(self, pod_uid: str, resources: PodResources) -> None:
        self._pods[pod_uid] = {n: normalize(r) for n, r in resources.items()}
        self._changed(pod_uid)

    def set_container(self, pod_uid: str, container: str, resources: Requirements) -> None:
        self._pods.setdefault(pod_uid, {})[container] = normalize(resources)
        self._changed(pod_uid)

    def remove_pod(self, pod_uid: str) -> None:
        if self._pods.pop(pod_uid, None) is not None:
            self._changed(pod_uid)

    def remove_orphans(self, keep: set[str]) -> None:
        gone = [u for u in self._pods if u not in keep]
        for u in gone:
            del self._pods[u]
            self._encoded.pop(u, None)
        if gone:
            self._store()

    def _changed(self, pod_uid: str) -> None:
        pod = self._pods.get(pod_uid)
        if pod is None:
            self._encoded.pop(pod_uid, None)
        else:
            self._encoded[pod_uid] = _entry(pod_uid, pod)
        self._store()

    def _store(self) -> None:
        if self.store is None or self._write_queued:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the loop (start-up, tools): at once
            self._write()
            return
        self._write_queued = True
        loop.call_soon(self._write)

    def _write(self) -> None:
        self._write_queued = False
        if self.store is None:
            return
        data = _data_of(self._encoded)
        if data == self._last:
            return
        try:
            self.store.write(self.key, _file_of(data))
            self._last = data
        except OSError as err:  # as upstream: logged, memory stays the truth
            log.error("Failed to save pod resource information checkpoint %s: %s", self.key, err)
