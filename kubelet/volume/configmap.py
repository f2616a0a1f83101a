"""configMap volumes (pkg/volume/configmap upstream).

The configMap comes from the node's shared object cache (one watch per
configMap, however many pods use it); its keys become files through the
atomic writer, so an update replaces the whole set at once. The reconciler
calls set_up again periodically (requires_remount) and only a change of
content writes anything.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from kubelet.objectcache import OBJECT_UNAVAILABLE, ObjectGetter, ObjectNotFoundError
from kubelet.types import KeyToPath, Pod
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume.atomic_writer import FileProjection, PayloadError, VolumeWriter

PLUGIN_NAME = "kubernetes.io/configmap"
DEFAULT_MODE = 0o644  # the API's default for defaultMode


def default_mode(source: Mapping[str, Any]) -> int:
    mode = source.get("defaultMode")
    return DEFAULT_MODE if mode is None else int(mode)


def fs_group_of(pod: Pod) -> int | None:
    group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if group is None else int(group)


def decode_base64(value: object, what: str) -> bytes:
    if not isinstance(value, str | bytes | None):
        raise VolumeError(f"{what}: invalid base64 data: not a string")
    try:
        return base64.b64decode(value or "", validate=True)
    except (binascii.Error, ValueError) as err:
        raise VolumeError(f"{what}: invalid base64 data: {err}") from err


async def get_object(
    getter: ObjectGetter, namespace: str, name: str, optional: bool
) -> dict[str, Any]:
    """The object, {} for a missing optional one; VolumeError otherwise."""
    try:
        return await getter.get(namespace, name)
    except ObjectNotFoundError as err:
        if optional:
            return {}
        raise VolumeError(str(err)) from err
    except VolumeError:
        raise
    except OBJECT_UNAVAILABLE as err:  # the message is fit for the event
        raise VolumeError(str(err) or repr(err)) from err


def make_payload(
    items: list[KeyToPath] | None,
    configmap: Mapping[str, Any],
    mode: int,
    optional: bool,
) -> dict[str, FileProjection]:
    """Files for a configMap (MakePayload upstream): every key of data and
    binaryData, or only the listed items at their paths with their modes."""
    data: Mapping[str, str] = configmap.get("data") or {}
    binary: Mapping[str, str] = configmap.get("binaryData") or {}
    payload: dict[str, FileProjection] = {}
    if not items:
        for key, value in data.items():
            payload[key] = FileProjection(value.encode(), mode)
        for key, value in binary.items():
            payload[key] = FileProjection(decode_base64(value, f"binaryData key {key}"), mode)
        return payload
    for item in items:
        key = item.get("key") or ""
        if key in data:
            content = data[key].encode()
        elif key in binary:
            content = decode_base64(binary[key], f"binaryData key {key}")
        elif optional:
            continue
        else:
            raise VolumeError(f"configmap references non-existent config key: {key}")
        item_mode = item.get("mode")
        payload[item.get("path") or key] = FileProjection(
            content, mode if item_mode is None else int(item_mode)
        )
    return payload


async def write_volume(
    writer: VolumeWriter,
    pod: Pod,
    spec: VolumeSpec,
    dir: str,
    payload: Mapping[str, FileProjection],
) -> bool:
    try:
        return await writer.write(pod, spec.get("name", ""), dir, payload, fs_group_of(pod))
    except PayloadError as err:
        raise VolumeError(str(err)) from err
    except OSError as err:
        raise VolumeError(f"error writing volume files: {err}") from err


async def remove_volume(writer: VolumeWriter, dir: str) -> None:
    try:
        await writer.remove(dir)
    except OSError as err:
        raise VolumeError(f"error removing volume directory: {err}") from err


class ConfigMapPlugin:
    name = PLUGIN_NAME
    requires_remount = True
    read_only = True

    def __init__(self, configmaps: ObjectGetter, writer: VolumeWriter | None = None) -> None:
        self.configmaps = configmaps
        self.writer = writer or VolumeWriter()

    def can_support(self, spec: VolumeSpec) -> bool:
        return spec.get("configMap") is not None

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        source = spec.get("configMap") or {}
        optional = bool(source.get("optional"))
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        configmap = await get_object(self.configmaps, namespace, source.get("name") or "", optional)
        payload = make_payload(source.get("items"), configmap, default_mode(source), optional)
        await write_volume(self.writer, pod, spec, dir, payload)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        await remove_volume(self.writer, dir)
