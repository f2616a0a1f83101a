"""What one volume operation does (operation_generator.go upstream): pick the
plugin for a pod's volume, set it up, adopt a dir found on disk, hand it to
the plugin a claim resolved to, tear it down. The reconciler (manager.py)
decides when each runs, with its back-off and bookkeeping; these functions
only talk to the plugins and the disk."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

from kubelet.types import Pod
from kubelet.util import mountutil
from kubelet.volume import (
    MountedVolume,
    Resolution,
    VolumeError,
    VolumeHost,
    VolumePlugin,
    VolumeSpec,
)
from kubelet.volume import util as volume_util
from kubelet.volumemanager.cache import MountedEntry, State, VolumeToMount
from kubelet.volumemanager.hooks import (
    AdoptingPlugin,
    DirMountPlugin,
    ExternalPathPlugin,
    ResolvingPlugin,
)
from kubelet.volumemanager.subpath import clean_subpaths

# Volume sources no plugin here will ever serve, with the reason.
_NOT_SUPPORTED = {
    "image": "image volumes are not supported by this kubelet",
}


def _volume_type(spec: VolumeSpec) -> str:
    return next((k for k in spec if k != "name"), "")


def _plain_mounted(name: str, dir: str, plugin: VolumePlugin) -> MountedVolume:
    return MountedVolume(
        name=name,
        host_path=dir,
        read_only=plugin.read_only,
        selinux_relabel=bool(getattr(plugin, "selinux_relabel", False)),
    )


def volume_to_mount(
    plugins: Sequence[VolumePlugin], host: VolumeHost, uid: str, spec: VolumeSpec
) -> VolumeToMount:
    """The pod's volume with the plugin that serves it, or why none does."""
    name = str(spec.get("name", ""))
    vtype = _volume_type(spec)
    plugin = None
    if vtype not in _NOT_SUPPORTED:
        plugin = next((p for p in plugins if p.can_support(spec)), None)
    if plugin is None:
        reason = _NOT_SUPPORTED.get(
            vtype, f'volume type "{vtype}" is not supported by this kubelet'
        )
        return VolumeToMount(name, spec, None, "", "", unsupported=reason)
    try:
        dir = host.pod_volume_dir(uid, plugin.name, name)
    except ValueError as err:
        return VolumeToMount(name, spec, None, "", "", unsupported=str(err))
    return VolumeToMount(
        name, spec, plugin, plugin.name, dir, resolved=not isinstance(plugin, ResolvingPlugin)
    )


async def set_up(pod: Pod, vol: VolumeToMount, remount: bool) -> MountedVolume:
    """MountVolume.SetUp through the volume's plugin; raises what it raises."""
    plugin = vol.plugin
    assert plugin is not None
    if isinstance(plugin, ExternalPathPlugin):
        return await plugin.set_up_volume(pod, vol.spec, vol.dir)
    if isinstance(plugin, DirMountPlugin):
        return await plugin.set_up_at(pod, vol.spec, vol.dir, remount)
    await plugin.set_up(pod, vol.spec, vol.dir)
    return _plain_mounted(vol.name, vol.dir, plugin)


def adopt(vol: VolumeToMount, entry: MountedEntry) -> MountedVolume | None:
    """The volume as mounted by the dir found on disk for it, or None (and the
    entry marked UNCERTAIN) when that dir must be set up again or is stale."""
    plugin = vol.plugin
    assert plugin is not None
    if isinstance(plugin, ExternalPathPlugin):
        # Its content is elsewhere: a dir of its own on disk is stale.
        entry.state = State.UNCERTAIN
        return None
    if isinstance(plugin, AdoptingPlugin) and not plugin.can_adopt(
        vol.spec, entry.dir, entry.fstype
    ):
        entry.state = State.UNCERTAIN  # set up again over it
        return None
    if isinstance(plugin, DirMountPlugin):
        found = plugin.adopt(vol.spec, entry.dir)
        if found is None:
            entry.state = State.UNCERTAIN  # set up again over it
        return found
    return _plain_mounted(vol.name, entry.dir, plugin)


def apply_resolution(
    by_name: Mapping[str, VolumePlugin],
    host: VolumeHost,
    uid: str,
    volumes: Mapping[str, VolumeToMount],
    vol: VolumeToMount,
    res: Resolution,
) -> str:
    """Hand the volume to the plugin named; an error text when it cannot be."""
    target = by_name.get(res.plugin_name)
    if target is None:
        return f'volume plugin "{res.plugin_name}" is not available in this kubelet'
    key = (res.plugin_name, res.dir_name)
    clash = next((v.name for v in volumes.values() if v is not vol and v.key == key), None)
    if clash is not None:
        return f"volume {vol.name} and volume {clash} use the same directory {res.dir_name}"
    try:
        dir = host.pod_volume_dir(uid, res.plugin_name, res.dir_name)
    except ValueError as err:
        return str(err)
    vol.plugin, vol.plugin_name, vol.spec = target, res.plugin_name, res.spec
    vol.dir_name = res.dir_name
    vol.dir = dir
    return ""


async def tear_down(
    plugin: VolumePlugin | None, uid: str, entry: MountedEntry, root_dir: str
) -> None:
    """UnmountVolume.TearDown: subPath mounts, the plugin's tear-down, then
    whatever is left of the dir and the empty dirs above it."""
    pod_dir = os.path.join(root_dir, "pods", uid)
    loop = asyncio.get_running_loop()
    # subPath mounts first: they hold the volume's content.
    # A claim's dir is named after its PV; its subPaths after the pod's volume.
    outer = entry.volume.name if entry.volume is not None else entry.name
    try:
        await loop.run_in_executor(None, clean_subpaths, pod_dir, outer)
    except OSError as err:
        raise VolumeError(f"error cleaning subPath mounts: {err}") from err
    if plugin is not None:
        await plugin.tear_down(uid, entry.name, entry.dir)
    # Whatever the plugin left (or all of it, for a plugin this kubelet
    # does not have), then the empty volumes/<plugin> dirs above it.
    await loop.run_in_executor(None, _clean_volume_dir, entry.dir, pod_dir)


def _clean_volume_dir(dir: str, pod_dir: str) -> None:
    if not dir:
        return
    volume_util.unmount_and_remove(dir, "remove")
    mountutil.remove_empty_parents(dir, pod_dir)
