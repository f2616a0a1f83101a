"""Desired and actual state of world (volumemanager/cache upstream).

Both are plain maps keyed by pod UID, touched only on the event loop. A volume
is identified inside its pod by (plugin name, volume name): the same pair names
its directory `<root>/pods/<uid>/volumes/<plugin~escaped>/<name>`, which is
what a restart finds on disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from kubelet.types import Pod
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.volume import VolumePlugin, VolumeSpec
from kubelet.volumemanager import MountedVolume
from kubelet.volumemanager.operations import PendingOperations

VolumeKey = tuple[str, str]  # (plugin name, volume name)


@dataclass
class VolumeToMount:
    """One wanted volume of one pod."""

    name: str
    spec: VolumeSpec
    plugin: VolumePlugin | None
    plugin_name: str
    dir: str
    # Why no plugin can serve it; such a volume is never set up.
    unsupported: str = ""
    remount_requested: bool = False
    # False until a ResolvingPlugin has said which plugin serves the volume
    # (a claim: the plugin of its PV); plugin, plugin_name, dir and dir_name
    # are that plugin's from then on.
    resolved: bool = True
    # The volume's dir name under the pod when it is not the volume's name
    # (the PV's name for a claim served by the CSI plugin).
    dir_name: str = ""

    @property
    def key(self) -> VolumeKey:
        return (self.plugin_name, self.dir_name or self.name)


@dataclass
class PodToMount:
    uid: str
    pod: Pod
    volumes: dict[str, VolumeToMount]
    # All volumes were mounted when last looked at; on_pod_ready fires on the
    # transition to True only.
    ready: bool = False
    added_at: float = 0.0  # monotonic: when the pod's volumes were first wanted


class DesiredStateOfWorld:
    def __init__(self) -> None:
        self.pods: dict[str, PodToMount] = {}


class State(Enum):
    MOUNTED = "mounted"
    # Found on disk after a restart, not claimed by a wanted volume yet.
    FOUND = "found"
    # A set-up failed and may have left something behind: torn down when no
    # longer wanted, never adopted.
    UNCERTAIN = "uncertain"


@dataclass
class MountedEntry:
    plugin_name: str
    name: str
    dir: str
    state: State
    volume: MountedVolume | None = None  # set in MOUNTED
    fstype: str | None = None  # what was mounted at dir when found on disk
    remount_at: float = math.inf

    @property
    def key(self) -> VolumeKey:
        return (self.plugin_name, self.name)


@dataclass
class PodMounts:
    entries: dict[VolumeKey, MountedEntry] = field(default_factory=dict)
    # The pod is gone (remove_pod, or housekeeping found it orphaned): tear
    # down everything, including volumes found on disk and never claimed.
    release: bool = False


class ActualStateOfWorld:
    def __init__(self) -> None:
        self.pods: dict[str, PodMounts] = {}

    def mounted(self, uid: str, key: VolumeKey) -> MountedVolume | None:
        pm = self.pods.get(uid)
        entry = pm.entries.get(key) if pm else None
        return entry.volume if entry is not None and entry.state is State.MOUNTED else None


class PodVolumeStates:
    """The desired and actual states of world and the operations in flight.
    Built before the volume manager, so the status manager (built before it)
    can ask from the start whether a pod's volumes are torn down."""

    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.dsw = DesiredStateOfWorld()
        self.asw = ActualStateOfWorld()
        self.ops = PendingOperations(clock)

    def volumes_torn_down(self, pod_uid: str) -> bool:
        """The pod is not wanted and none of its volumes is left mounted
        (podVolumesExist upstream, negated)."""
        return (
            pod_uid not in self.asw.pods
            and not self.ops.pod_busy(pod_uid)
            and pod_uid not in self.dsw.pods
        )
