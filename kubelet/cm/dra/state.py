"""<root-dir>/dra_manager_state as the Go kubelet writes it (cm/dra/state):
the claims this node prepared, the pods using each and the devices each
driver prepared for it, so either kubelet reads the other's file.

The file is {"Data": <JSON text>, "Checksum": <CRC-32 (IEEE) of that text>};
the JSON inside is written field by field the way encoding/json writes the Go
structs (declaration order, maps sorted by key, nil slices and maps as null),
which is what the checksum is taken of.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from kubelet.checkpointmanager import (
    CheckpointError,
    CheckpointStore,
    CorruptCheckpointError,
    clean_string,
    go_list,
    go_map,
    go_object,
    go_string,
    go_uint,
    load_json,
    opt_strings,
    struct_fields,
)

CHECKPOINT_NAME = "dra_manager_state"
KIND = "DRACheckpoint"
API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"


@dataclass
class Device:
    """One device a driver prepared for a claim (state.Device)."""

    pool_name: str
    device_name: str
    request_names: list[str] | None = None
    cdi_device_ids: list[str] | None = None


@dataclass
class ClaimInfoState:
    """A prepared (or being prepared) claim (state.ClaimInfoState)."""

    claim_uid: str
    claim_name: str
    namespace: str
    pod_uids: set[str] = field(default_factory=set)
    # driver name -> its devices (None: nothing prepared by it yet)
    driver_state: dict[str, list[Device] | None] = field(default_factory=dict)


def _strings(items: list[str] | None) -> str:
    return go_list(None if items is None else [go_string(s) for s in items])


def _device_json(d: Device) -> str:
    return go_object((
        ("PoolName", go_string(d.pool_name)),
        ("DeviceName", go_string(d.device_name)),
        ("RequestNames", _strings(d.request_names)),
        ("CDIDeviceIDs", _strings(d.cdi_device_ids)),
    ))  # fmt: skip


def _claim_json(c: ClaimInfoState) -> str:
    drivers = {
        name: go_object([("Devices", go_list(None if devs is None else map(_device_json, devs)))])
        for name, devs in c.driver_state.items()
    }
    return go_object((
        ("ClaimUID", go_string(c.claim_uid)),
        ("ClaimName", go_string(c.claim_name)),
        ("Namespace", go_string(c.namespace)),
        ("PodUIDs", go_map({u: "{}" for u in c.pod_uids})),
        ("DriverState", go_map(drivers)),
    ))  # fmt: skip


def encode(claims: list[ClaimInfoState] | None) -> bytes:
    """The checkpoint file's bytes (None writes a null list, as a fresh file)."""
    items = None if claims is None else [_claim_json(c) for c in claims]
    data = go_object((
        ("kind", go_string(KIND)),
        ("apiVersion", go_string(API_VERSION)),
        ("ClaimInfoStateList", go_list(items)),
    ))  # fmt: skip
    checksum = zlib.crc32(data.encode())
    return go_object((("Data", go_string(data)), ("Checksum", str(checksum)))).encode()


# ------------------------------------------------------------------ reading


def _device(obj: object, where: str) -> Device:
    f = struct_fields(obj, ("PoolName", "DeviceName", "RequestNames", "CDIDeviceIDs"), where)
    return Device(
        clean_string(f.get("PoolName", ""), where),
        clean_string(f.get("DeviceName", ""), where),
        opt_strings(f.get("RequestNames"), where),
        opt_strings(f.get("CDIDeviceIDs"), where),
    )


def _claim(obj: object, where: str) -> ClaimInfoState:
    names = ("ClaimUID", "ClaimName", "Namespace", "PodUIDs", "DriverState")
    f = struct_fields(obj, names, where)
    pods = f.get("PodUIDs") or {}
    drivers = f.get("DriverState") or {}
    if not isinstance(pods, dict) or not isinstance(drivers, dict):
        raise CheckpointError(f"{where}: PodUIDs and DriverState must be objects")
    state: dict[str, list[Device] | None] = {}
    for name, ds in drivers.items():
        devs = struct_fields(ds, ("Devices",), f"{where}.DriverState").get("Devices")
        if devs is not None and not isinstance(devs, list):
            raise CheckpointError(f"{where}.DriverState[{name}].Devices: want a list")
        state[clean_string(name, where)] = (
            None if devs is None else [_device(d, f"{where}.Devices") for d in devs]
        )
    return ClaimInfoState(
        clean_string(f.get("ClaimUID", ""), where),
        clean_string(f.get("ClaimName", ""), where),
        clean_string(f.get("Namespace", ""), where),
        {clean_string(u, where) for u in pods},
        state,
    )


def decode(blob: bytes) -> list[ClaimInfoState]:
    """The claims in a checkpoint file; CheckpointError when it is corrupt."""
    outer = struct_fields(load_json(blob), ("Data", "Checksum"), "checkpoint")
    data = clean_string(outer.get("Data", ""), "Data")
    want = go_uint(outer.get("Checksum", 0), "Checksum")
    got = zlib.crc32(data.encode())
    if got != want:
        raise CorruptCheckpointError(want, got)
    inner: Any = load_json(data.encode())
    # The list was renamed once (Entries before); upstream reads only this name.
    items = struct_fields(inner, ("ClaimInfoStateList",), "Data").get("ClaimInfoStateList")
    if items is None:
        return []
    if not isinstance(items, list):
        raise CheckpointError("ClaimInfoStateList: want a list")
    return [_claim(c, f"ClaimInfoStateList[{i}]") for i, c in enumerate(items)]


def load_or_create(store: CheckpointStore) -> list[ClaimInfoState]:
    """GetOrCreate: the stored claims, or an empty file written now."""
    blob = store.read(CHECKPOINT_NAME)
    if blob is None:
        store.write(CHECKPOINT_NAME, encode(None))
        return []
    return decode(blob)


__all__ = ["CHECKPOINT_NAME", "ClaimInfoState", "Device", "decode", "encode", "load_or_create"]
