"""downwardAPI volumes (pkg/volume/downwardapi upstream): one file per item,
from a metadata field of the pod (fieldRef) or a container resource
(resourceFieldRef, limits defaulted from node allocatable), resolved by
kubelet.fieldpath. Labels and annotations change without a new pod, so the
reconciler re-runs set_up (requires_remount) and a change rewrites the set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from kubelet import fieldpath
from kubelet.types import DownwardAPIVolumeFile, Pod
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume.atomic_writer import FileProjection, VolumeWriter
from kubelet.volume.configmap import default_mode, remove_volume, write_volume

PLUGIN_NAME = "kubernetes.io/downward-api"

# The node's allocatable resources as quantities ({"cpu": "4", "memory": "8Gi"}):
# read per set-up, since they change with the node's configuration.
NodeAllocatable = Callable[[], Mapping[str, str]]


def aggregate(errors: list[str]) -> VolumeError:
    """One error as itself, several as upstream's aggregate `[a, b]`."""
    if len(errors) == 1:
        return VolumeError(errors[0])
    return VolumeError("[" + ", ".join(errors) + "]")


def collect_data(
    items: list[DownwardAPIVolumeFile] | None,
    pod: Pod,
    node_allocatable: NodeAllocatable,
    mode: int,
) -> tuple[dict[str, FileProjection], list[str]]:
    """Files for downwardAPI items (CollectData upstream) and the errors met."""
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for item in items or []:
        path = os.path.normpath(item.get("path") or "")
        item_mode = item.get("mode")
        file_mode = mode if item_mode is None else int(item_mode)
        content = b""
        field_ref = item.get("fieldRef")
        resource_ref = item.get("resourceFieldRef")
        try:
            if field_ref is not None:
                content = fieldpath.extract_field_path(
                    pod, field_ref.get("fieldPath") or ""
                ).encode()
            elif resource_ref is not None:
                content = fieldpath.extract_resource_value(
                    resource_ref, pod, resource_ref.get("containerName") or "", node_allocatable()
                ).encode()
        except (ValueError, KeyError) as err:
            errors.append(str(err))
        payload[path] = FileProjection(content, file_mode)
    return payload, errors


class DownwardAPIPlugin:
    name = PLUGIN_NAME
    requires_remount = True
    read_only = True

    def __init__(
        self,
        node_allocatable: NodeAllocatable = dict,
        writer: VolumeWriter | None = None,
    ) -> None:
        self.node_allocatable = node_allocatable
        self.writer = writer or VolumeWriter()

    def can_support(self, spec: VolumeSpec) -> bool:
        return spec.get("downwardAPI") is not None

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        source = spec.get("downwardAPI") or {}
        payload, errors = collect_data(
            source.get("items"), pod, self.node_allocatable, default_mode(source)
        )
        if errors:
            raise aggregate(errors)
        await write_volume(self.writer, pod, spec, dir, payload)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        await remove_volume(self.writer, dir)
