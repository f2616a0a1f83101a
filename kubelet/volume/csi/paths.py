"""The CSI on-disk layout, as upstream lays it out (csi_attacher.go,
csi_mounter.go), and the few file operations on it. Blocking: callers run
these in an executor.

    <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volume handle)>/globalmount
    <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volume handle)>/vol_data.json
    <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount
    <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/vol_data.json

A raw block volume (a PV with volumeMode Block) is laid out as upstream's
block mapper lays it out (csi_block.go):

    <root>/plugins/kubernetes.io/csi/volumeDevices/staging/<pv>          NodeStage's path
    <root>/plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>    NodePublish's file
    <root>/plugins/kubernetes.io/csi/volumeDevices/<pv>/data/vol_data.json
    <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/vol_data.json       (volumeMode: Block)

    <root>/pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>               link to the publish file

The pod's record stays in the pod's volumes dir (upstream has only the link
under `pods/<uid>/volumeDevices/`), so tear-down and reconstruction find it
as they find a mounted volume's; the link is made for tools that look there.

<name> is the PV's name for a persistent volume and the pod's volume name for
an inline one. The driver controls what is at `globalmount` and `mount` (it
mounts there, unmounts at NodeUnpublish/NodeUnstage, and may leave anything
behind): tear-down only removes those entries themselves, once nothing is
mounted at or below them; it never follows a link found there and never
deletes what is inside them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable

from kubelet.util import mountutil
from kubelet.volume import VolumeError
from kubelet.volume.csi import PLUGIN_NAME, validate_driver_name

VOL_DATA = "vol_data.json"
GLOBAL_MOUNT = "globalmount"
TARGET = "mount"
MAX_VOL_DATA = 64 * 1024

# vol_data.json keys (volDataKey upstream).
SPEC_VOL_ID = "specVolID"
VOLUME_HANDLE = "volumeHandle"
DRIVER_NAME = "driverName"
NODE_NAME = "nodeName"
ATTACHMENT_ID = "attachmentID"
LIFECYCLE_MODE = "volumeLifecycleMode"
PERSISTENT = "Persistent"
EPHEMERAL = "Ephemeral"
# Ours, in the pod's record only: "Block" for a raw block volume.
VOLUME_MODE = "volumeMode"
BLOCK = "Block"

VOLUME_DEVICES = "volumeDevices"
_ESCAPED_PLUGIN = PLUGIN_NAME.replace("/", "~")


def plugin_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "plugins", PLUGIN_NAME)


def handle_digest(volume_handle: str) -> str:
    return hashlib.sha256(volume_handle.encode()).hexdigest()


def device_mount_path(root_dir: str, driver: str, volume_handle: str) -> str:
    """The staging (global) mount of a persistent volume on this node."""
    why = validate_driver_name(driver)
    if why:
        raise VolumeError(why)
    if not volume_handle:
        raise VolumeError("makeDeviceMountPath failed, volume handle is empty")
    return os.path.join(plugin_dir(root_dir), driver, handle_digest(volume_handle), GLOBAL_MOUNT)


def block_dir(root_dir: str) -> str:
    return os.path.join(plugin_dir(root_dir), VOLUME_DEVICES)


def block_staging_path(root_dir: str, pv_name: str) -> str:
    """NodeStageVolume's staging_target_path for a block volume (GetStagingPath)."""
    return os.path.join(block_dir(root_dir), "staging", check_dir_name(pv_name))


def staging_path(root_dir: str, driver: str, volume_handle: str, block_pv: str = "") -> str:
    """Where a volume is staged: a block volume by its PV's name, others by
    driver and handle."""
    if block_pv:
        return block_staging_path(root_dir, block_pv)
    return device_mount_path(root_dir, driver, volume_handle)


def block_publish_path(root_dir: str, pv_name: str, pod_uid: str) -> str:
    """NodePublishVolume's target_path for a block volume: a file the driver
    puts the device at (getPublishPath)."""
    pv, uid = check_dir_name(pv_name), check_dir_name(pod_uid)
    return os.path.join(block_dir(root_dir), "publish", pv, uid)


def block_data_dir(root_dir: str, pv_name: str) -> str:
    """Where the staged block volume's vol_data.json lives."""
    return os.path.join(block_dir(root_dir), check_dir_name(pv_name), "data")


def pod_device_link(root_dir: str, pod_uid: str, pv_name: str) -> str:
    """The pod's link to its block volume (GetPodDeviceMapPath upstream)."""
    uid, pv = check_dir_name(pod_uid), check_dir_name(pv_name)
    return os.path.join(root_dir, "pods", uid, VOLUME_DEVICES, _ESCAPED_PLUGIN, pv)


def make_pod_device_link(link: str, target: str) -> None:
    """(Re)make the link; anything there that is not a link is left and refused."""
    os.makedirs(os.path.dirname(link), mode=0o750, exist_ok=True)
    try:
        if not stat.S_ISLNK(os.lstat(link).st_mode):
            raise VolumeError(f"{link} exists and is not a symbolic link")
        os.unlink(link)
    except FileNotFoundError:
        pass
    os.symlink(target, link)


def remove_pod_device_link(link: str) -> None:
    """Unlink the link (never what it points at) and the empty dirs above it
    up to the pod's dir."""
    try:
        if stat.S_ISLNK(os.lstat(link).st_mode):
            os.unlink(link)
    except FileNotFoundError:
        pass
    pod_dir = os.path.dirname(os.path.dirname(os.path.dirname(link)))
    mountutil.remove_empty_parents(link, pod_dir)


def is_block_device(path: str) -> bool:
    """Whether `path` itself is a block device: a link there is not one,
    whatever it points at."""
    try:
        return stat.S_ISBLK(os.lstat(path).st_mode)
    except OSError:
        return False


def attachment_name(volume_handle: str, driver: str, node: str) -> str:
    """The VolumeAttachment's name for this volume on this node (getAttachmentName)."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{driver}{node}".encode()).hexdigest()


def inline_volume_handle(pod_uid: str, volume_name: str) -> str:
    """The handle of an inline ephemeral volume (makeVolumeHandle)."""
    return "csi-" + hashlib.sha256(f"{pod_uid}{volume_name}".encode()).hexdigest()


def check_dir_name(name: str) -> str:
    """A PV or pod volume name, as a single path component under the pod's
    volumes dir. The API server validates both; this refuses what could
    escape the dir anyway."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or len(name) > 253:
        raise VolumeError(f"invalid volume name {name!r} for a CSI volume directory")
    return name


# ------------------------------------------------------------ vol_data.json


def save_vol_data(dir: str, data: dict[str, str]) -> None:
    """Write dir/vol_data.json by rename, so a kubelet killed meanwhile leaves
    the old file or the new one. Not fsynced (nor is upstream's): a power loss
    may leave an empty file, which reconstruction reports and skips."""
    tmp = os.path.join(dir, "." + VOL_DATA + ".tmp")
    raw = json.dumps(data, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        os.write(fd, raw)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(dir, VOL_DATA))


def load_vol_data(dir: str) -> dict[str, str]:
    """dir/vol_data.json; FileNotFoundError when absent, VolumeError when unusable."""
    path = os.path.join(dir, VOL_DATA)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise FileNotFoundError(path) from err
        raise VolumeError(f"failed to open volume data file [{path}]: {err.strerror}") from err
    try:
        raw = os.read(fd, MAX_VOL_DATA + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw) if len(raw) <= MAX_VOL_DATA else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in doc.items()
    ):
        raise VolumeError(f"volume data file [{path}] is not a JSON object of strings")
    why = validate_driver_name(doc.get(DRIVER_NAME, ""))
    if why:
        raise VolumeError(f"volume data file [{path}]: {why}")
    return doc


# -------------------------------------------------------------- tear-down


def _split(path: str) -> tuple[str, str]:
    # Only the parent is resolved: the last component is the driver's.
    return os.path.realpath(os.path.dirname(path)), os.path.basename(path)


def is_mount_point(path: str) -> bool:
    """Whether something is mounted exactly at `path`; a link there is never followed."""
    return mountutil.mounted_at(*_split(path))


def mounts_below(path: str, mountinfo: str = mountutil.MOUNTINFO) -> list[str]:
    return mountutil.mount_points_under(os.path.join(*_split(path)), mountinfo)


def remove_mount_dir(path: str, mountinfo: str = mountutil.MOUNTINFO) -> None:
    """removeMountDir upstream: once nothing is mounted at or under `path`,
    remove it (a link is unlinked, a directory removed only when empty),
    then the vol_data.json beside it and the dir holding both. A mount still
    there, or content left in the dir, is an error: nothing is deleted then."""
    if is_mount_point(path):
        raise VolumeError(f"{path} is still mounted")
    below = mounts_below(path, mountinfo)
    if below:
        raise VolumeError(f"{path} has mounts under it: {', '.join(below[:3])}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    try:
        if st is not None and stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        elif st is not None:
            os.unlink(path)
    except OSError as err:
        raise VolumeError(
            f"failed to remove dir [{path}]: {mountutil.lowercase_strerror(err)}"
        ) from err
    remove_record(os.path.dirname(path))


def remove_block_target(path: str) -> None:
    """The publish file of a block volume, once nothing is mounted there: the
    driver removes it on NodeUnpublish; one it left (or made before failing)
    is unlinked, never followed. Anything but a file or a device node is left."""
    if is_mount_point(path):
        raise VolumeError(f"{path} is still mounted")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISLNK(st.st_mode):
        _remove_each((path, os.unlink))


def remove_record(dir: str) -> None:
    """dir's vol_data.json (and a temporary one), then dir, which must be empty."""
    _remove_each(
        (os.path.join(dir, VOL_DATA), os.unlink),
        (os.path.join(dir, "." + VOL_DATA + ".tmp"), os.unlink),
        (dir, os.rmdir),
    )


def _remove_each(*steps: tuple[str, Callable[[str], None]]) -> None:
    for p, remove in steps:
        try:
            remove(p)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise VolumeError(
                f"failed to remove [{p}]: {mountutil.lowercase_strerror(err)}"
            ) from err


def remove_block_dirs(root_dir: str, pv_name: str, mountinfo: str = mountutil.MOUNTINFO) -> None:
    """After NodeUnstage of a block volume (cleanupOrphanDeviceFiles): the
    staging and publish dirs, empty by now, and the volume's record. Content
    left in them is an error, never deleted."""
    staging = block_staging_path(root_dir, pv_name)
    publish = os.path.dirname(block_publish_path(root_dir, pv_name, "x"))
    data = block_data_dir(root_dir, pv_name)
    for d in (staging, publish):
        if is_mount_point(d) or mounts_below(d, mountinfo):
            raise VolumeError(f"{d} is still mounted")
    _remove_each((staging, os.rmdir), (publish, os.rmdir))
    remove_record(data)
    _remove_each((os.path.dirname(data), os.rmdir))
