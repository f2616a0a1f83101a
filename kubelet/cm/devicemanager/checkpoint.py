"""<root-dir>/device-plugins/kubelet_internal_checkpoint as the Go kubelet writes
it (devicemanager/checkpoint): the containers' devices with the plugins'
Allocate answers (protobuf bytes, base64 in the JSON) and the resources
registered, with upstream's checksum over the Data struct, so either kubelet
reads the other's file.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from kubelet.checkpointmanager import (
    CheckpointError,
    clean_string,
    go_int,
    go_list,
    go_map,
    go_object,
    go_string,
    go_uint,
    load_json,
    opt_strings,
    struct_fields,
)
from kubelet.checkpointmanager.checksum import GoMap, GoScalar, GoSlice, GoStruct, GoValue, checksum


@dataclass
class Entry:
    """PodDevicesEntry."""

    pod_uid: str
    container: str
    resource: str
    device_ids: dict[int, list[str] | None] | None  # DevicesPerNUMA: NUMA node -> IDs
    alloc_resp: bytes | None  # a marshalled ContainerAllocateResponse


@dataclass
class DeviceCheckpoint:
    entries: list[Entry] | None
    registered: dict[str, list[str] | None] | None  # resource -> device IDs
    checksum: int = 0


def _strings(items: list[str] | None) -> GoSlice:
    return GoSlice(
        "[]string", None if items is None else tuple(GoScalar("string", s) for s in items)
    )


def _entry_value(e: Entry) -> GoValue:
    ids = None
    if e.device_ids is not None:
        ids = tuple((GoScalar("int64", n), _strings(v)) for n, v in e.device_ids.items())
    resp = None if e.alloc_resp is None else tuple(GoScalar("uint8", b) for b in e.alloc_resp)
    return GoStruct(
        "checkpoint.PodDevicesEntry",
        (
            ("PodUID", GoScalar("string", e.pod_uid)),
            ("ContainerName", GoScalar("string", e.container)),
            ("ResourceName", GoScalar("string", e.resource)),
            ("DeviceIDs", GoMap("checkpoint.DevicesPerNUMA", ids)),
            ("AllocResp", GoSlice("[]uint8", resp)),
        ),
    )


def go_value(cp: DeviceCheckpoint) -> GoValue:
    """checkpointData as spew prints it (what the checksum is taken of)."""
    entries = None if cp.entries is None else tuple(_entry_value(e) for e in cp.entries)
    reg = None
    if cp.registered is not None:
        reg = tuple((GoScalar("string", r), _strings(v)) for r, v in cp.registered.items())
    return GoStruct(
        "checkpoint.checkpointData",
        (
            ("PodDeviceEntries", GoSlice("[]checkpoint.PodDevicesEntry", entries)),
            ("RegisteredDevices", GoMap("map[string][]string", reg)),
        ),
    )


def _json_strings(items: list[str] | None) -> str:
    return go_list(None if items is None else (go_string(s) for s in items))


def _json_entry(e: Entry) -> str:
    ids = None
    if e.device_ids is not None:
        ids = {str(n): _json_strings(v) for n, v in e.device_ids.items()}
    resp = "null" if e.alloc_resp is None else go_string(base64.b64encode(e.alloc_resp).decode())
    return go_object(
        (
            ("PodUID", go_string(e.pod_uid)),
            ("ContainerName", go_string(e.container)),
            ("ResourceName", go_string(e.resource)),
            # Go writes int64 keys as strings, sorted as strings.
            ("DeviceIDs", go_map(ids)),
            ("AllocResp", resp),
        )
    )


def marshal(cp: DeviceCheckpoint) -> bytes:
    """MarshalCheckpoint: the checksum of Data, then Go's JSON of the whole."""
    cp.checksum = checksum(go_value(cp))
    entries = go_list(None if cp.entries is None else (_json_entry(e) for e in cp.entries))
    reg = None
    if cp.registered is not None:
        reg = {r: _json_strings(v) for r, v in cp.registered.items()}
    data = go_object((("PodDeviceEntries", entries), ("RegisteredDevices", go_map(reg))))
    return go_object((("Data", data), ("Checksum", str(cp.checksum)))).encode()


def _read_entry(raw: Any, where: str) -> Entry:
    f = struct_fields(
        raw, ("PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"), where
    )
    ids: dict[int, list[str] | None] | None = None
    if f.get("DeviceIDs") is not None:
        if not isinstance(f["DeviceIDs"], dict):
            raise CheckpointError(f"{where}.DeviceIDs: want an object")
        ids = {}
        for k, v in f["DeviceIDs"].items():
            try:
                node = go_int(int(k), f"{where}.DeviceIDs")
            except ValueError:
                raise CheckpointError(f"{where}.DeviceIDs: key {k!r} is not an int64") from None
            ids[node] = opt_strings(v, f"{where}.DeviceIDs")
    resp: bytes | None = None
    if f.get("AllocResp") is not None:
        try:
            resp = base64.b64decode(clean_string(f["AllocResp"], where), validate=True)
        except binascii.Error as err:
            raise CheckpointError(f"{where}.AllocResp: {err}") from None
    return Entry(
        clean_string(f.get("PodUID", ""), where),
        clean_string(f.get("ContainerName", ""), where),
        clean_string(f.get("ResourceName", ""), where),
        ids,
        resp,
    )


def unmarshal(blob: bytes) -> DeviceCheckpoint:
    """UnmarshalCheckpoint and VerifyChecksum; CheckpointError when it is corrupt."""
    top = struct_fields(load_json(blob), ("Data", "Checksum"), "checkpoint")
    data = struct_fields(top.get("Data") or {}, ("PodDeviceEntries", "RegisteredDevices"), "Data")
    # Go decodes into an empty slice and map: a missing key leaves them empty,
    # null makes them nil (spew tells the two apart, so the checksum does).
    entries: list[Entry] | None = []
    if "PodDeviceEntries" in data:
        raw_entries = data["PodDeviceEntries"]
        if raw_entries is None:
            entries = None
        elif isinstance(raw_entries, list):
            entries = [
                _read_entry(e, f"Data.PodDeviceEntries[{i}]") for i, e in enumerate(raw_entries)
            ]
        else:
            raise CheckpointError("Data.PodDeviceEntries: want a list")
    registered: dict[str, list[str] | None] | None = {}
    if "RegisteredDevices" in data:
        raw_reg = data["RegisteredDevices"]
        if raw_reg is None:
            registered = None
        elif isinstance(raw_reg, dict):
            registered = {
                clean_string(k, "RegisteredDevices"): opt_strings(v, "RegisteredDevices")
                for k, v in raw_reg.items()
            }
        else:
            raise CheckpointError("Data.RegisteredDevices: want an object")
    cp = DeviceCheckpoint(entries, registered, go_uint(top.get("Checksum", 0), "Checksum"))
    if checksum(go_value(cp)) != cp.checksum:
        raise CheckpointError("checkpoint is corrupted")
    return cp
