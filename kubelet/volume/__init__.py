"""Volume plugins (pkg/volume upstream): one module per volume type.

A plugin turns one entry of `pod.spec.volumes` into a directory on the host
under the pod's volumes dir, which the volume manager then hands to the
runtime as bind mounts. The interface is fixed here so that plugins and the
volume manager can be written apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kubelet.util import filesystem

Pod = dict[str, Any]
VolumeSpec = dict[str, Any]  # one entry of pod.spec.volumes


class VolumeError(Exception):
    """A volume could not be set up or torn down. The message is what the
    FailedMount / FailedUnMount event says after the volume name, as upstream
    (`MountVolume.SetUp failed for volume "v" : <message>`)."""


@dataclass(frozen=True)
class VolumeHost:
    """What plugins may know of the node (VolumeHost upstream)."""

    root_dir: str  # the kubelet's --root-dir
    node_name: str

    def pod_volume_dir(self, pod_uid: str, plugin_name: str, volume_name: str) -> str:
        # <root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>, as upstream,
        # so tools that know the Go kubelet's layout find the same paths.
        escaped = filesystem.component(plugin_name.replace("/", "~"), "volume plugin")
        uid = filesystem.component(pod_uid, "pod uid")
        return f"{self.root_dir}/pods/{uid}/volumes/{escaped}/{filesystem.component(volume_name, 'volume name')}"


class VolumePlugin(Protocol):
    # e.g. "kubernetes.io/configmap" (the directory is kubernetes.io~configmap)
    name: str
    # True for volumes whose content follows API objects (configMap, secret,
    # downwardAPI, projected): the reconciler re-runs set_up periodically.
    requires_remount: bool
    # Mounted read-only in every container whatever the volumeMount says
    # (GetAttributes().ReadOnly upstream): the API-backed volumes, whose files
    # the kubelet rewrites and a container must never be able to alter
    # (CVE-2017-1002102).
    read_only: bool

    def can_support(self, spec: VolumeSpec) -> bool: ...

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        """Make `dir` hold the volume's content (idempotent: called again on
        remount). Raises VolumeError."""
        ...

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        """Undo set_up (unmount tmpfs, remove files). Raises VolumeError."""
        ...
