"""Volume plugins (pkg/volume upstream): one module per volume type.

A plugin turns one entry of `pod.spec.volumes` into a directory on the host
under the pod's volumes dir, which the volume manager then hands to the
runtime as bind mounts. The interface is fixed here so that plugins and the
volume manager can be written apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kubelet.types import Pod, Volume
from kubelet.util import filesystem

VolumeSpec = Volume  # one entry of pod.spec.volumes


@dataclass(frozen=True)
class MountedVolume:
    """A volume set up for a pod: where it is on the host."""

    name: str  # the pod.spec.volumes[].name
    host_path: str
    read_only: bool = False  # the volume itself is read-only (e.g. PVC readOnly)
    # For tmpfs and other real mounts: the selinux relabel hint upstream passes on.
    selinux_relabel: bool = False
    # A raw block volume: host_path is a block device, which containers get
    # through their volumeDevices (CRI devices), never as a bind mount.
    block: bool = False


@dataclass(frozen=True)
class Resolution:
    """Which plugin really serves a volume, found at set-up time (a claim is
    served by the plugin of the PV it is bound to): that plugin's name, the
    name of the volume's dir under the pod (the PV's name, as upstream), and
    the spec that plugin takes."""

    plugin_name: str
    dir_name: str
    spec: VolumeSpec


class VolumeError(Exception):
    """A volume could not be set up or torn down. The message is what the
    FailedMount / FailedUnMount event says after the volume name, as upstream
    (`MountVolume.SetUp failed for volume "v" : <message>`). `operation` is
    that prefix: a raw block volume's set-up says `MapVolume.SetUpDevice` or
    `MapVolume.MapPodDevice` there, as upstream's operation generator does."""

    operation = "MountVolume.SetUp"
    # The event's reason: VolumeResizeFailed for an in-use expansion, as upstream.
    reason = "FailedMount"

    def __init__(self, message: str = "", operation: str = "", reason: str = "") -> None:
        super().__init__(message)
        if operation:
            self.operation = operation
        if reason:
            self.reason = reason


class ClaimNotReady(VolumeError):
    """A claim or its PV that cannot be read, or is not bound to each other
    yet: upstream's populator errors, which only its log shows. Often brief
    (the API server's node authorizer answers 403 for a new pod's claim for a
    moment), so here an event says so only once the pod has waited for its
    volumes as long as upstream's WaitForAttachAndMount does."""


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
