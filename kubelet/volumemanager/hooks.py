"""Optional plugin methods the volume manager looks for beyond VolumePlugin.

VolumePlugin's set_up fills the directory the manager hands it, which is
where the container's bind mount then comes from. Two kinds of plugin need
more, and implement these methods next to set_up (checked with getattr, so
plugins that do not need them, like configMap, stay plain VolumePlugins).
A plugin may also set a class attribute `selinux_relabel = True` (upstream's
Attributes.SELinuxRelabel) for volumes the runtime should relabel.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kubelet.types import Pod
from kubelet.volume import Resolution, VolumeSpec
from kubelet.volumemanager import MountedVolume


@runtime_checkable
class ExternalPathPlugin(Protocol):
    """The volume lives elsewhere on the host (hostPath, a PVC's hostPath or
    local PV): set_up_volume checks or prepares it and says where it is and
    whether it must be mounted read-only. The manager calls this instead of
    set_up."""

    async def set_up_volume(self, pod: Pod, spec: VolumeSpec, dir: str) -> MountedVolume: ...


@runtime_checkable
class AdoptingPlugin(Protocol):
    """After a kubelet restart the manager finds `dir` on disk. Return False
    when it is not usable as it is (a Memory emptyDir whose tmpfs is gone after
    a reboot): the manager then sets the volume up again. Plugins without this
    method have every directory found adopted."""

    def can_adopt(self, spec: VolumeSpec, dir: str, mounted_fstype: str | None) -> bool: ...


@runtime_checkable
class ResolvingPlugin(Protocol):
    """A plugin that may hand a volume over to another (the PVC plugin). The
    manager calls resolve once per pod volume before anything else; None
    keeps the volume with this plugin. Raises VolumeError (retried)."""

    async def resolve(self, pod: Pod, spec: VolumeSpec) -> Resolution | None: ...


@runtime_checkable
class DirMountPlugin(Protocol):
    """The volume is mounted somewhere under `dir` by the plugin (CSI:
    dir/mount, with its record beside it). set_up_at says where; remount is
    True for the periodic call on an already mounted volume. After a restart,
    adopt(spec, dir) returns the volume found mounted there, or None to have
    it set up again."""

    async def set_up_at(
        self, pod: Pod, spec: VolumeSpec, dir: str, remount: bool
    ) -> MountedVolume: ...

    def adopt(self, spec: VolumeSpec, dir: str) -> MountedVolume | None: ...
