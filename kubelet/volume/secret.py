"""secret volumes (pkg/volume/secret upstream): as configMap volumes, with
the secret's base64 `data` decoded. Upstream writes them on a tmpfs (a
Memory emptyDir); here the files live under the pod's volumes dir on disk,
so that secrets work where this kubelet may not mount."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubelet.objectcache import ObjectGetter
from kubelet.types import KeyToPath, Pod
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume.atomic_writer import FileProjection, VolumeWriter
from kubelet.volume.configmap import (
    decode_base64,
    default_mode,
    get_object,
    remove_volume,
    write_volume,
)

PLUGIN_NAME = "kubernetes.io/secret"


def make_payload(
    items: list[KeyToPath] | None,
    secret: Mapping[str, Any],
    mode: int,
    optional: bool,
) -> dict[str, FileProjection]:
    """Files for a secret (MakePayload upstream)."""
    data: Mapping[str, str] = secret.get("data") or {}
    payload: dict[str, FileProjection] = {}
    if not items:
        for key, value in data.items():
            payload[key] = FileProjection(decode_base64(value, f"secret key {key}"), mode)
        return payload
    for item in items:
        key = item.get("key") or ""
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"references non-existent secret key: {key}")
        item_mode = item.get("mode")
        payload[item.get("path") or key] = FileProjection(
            decode_base64(data[key], f"secret key {key}"),
            mode if item_mode is None else int(item_mode),
        )
    return payload


class SecretPlugin:
    name = PLUGIN_NAME
    requires_remount = True
    read_only = True

    def __init__(self, secrets: ObjectGetter, writer: VolumeWriter | None = None) -> None:
        self.secrets = secrets
        self.writer = writer or VolumeWriter(memory_backed=True)

    def can_adopt(self, spec: VolumeSpec, dir: str, mounted_fstype: str | None) -> bool:
        # After a reboot the dir is there but its tmpfs (and so its files) is not.
        return mounted_fstype == "tmpfs"

    def can_support(self, spec: VolumeSpec) -> bool:
        return spec.get("secret") is not None

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        source = spec.get("secret") or {}
        optional = bool(source.get("optional"))
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        secret = await get_object(self.secrets, namespace, source.get("secretName") or "", optional)
        payload = make_payload(source.get("items"), secret, default_mode(source), optional)
        await write_volume(self.writer, pod, spec, dir, payload)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        await remove_volume(self.writer, dir)
