"""The volume manager (volumemanager.go, populator, reconciler upstream).

add_pod/remove_pod fill the desired state; the reconciler brings the actual
state to it. Unlike upstream's reconciler, which walks every volume of every
pod each 100 ms, this one is driven by a set of dirty pod UIDs and a timer
heap (back-off expiries, periodic remounts), so a node with 5,000 quiet pods
costs nothing between changes. Each set-up or tear-down runs as its own task,
one per volume at a time, with upstream's exponential back-off per failing
volume, so a slow or failing volume never holds up another. What each
operation does with the plugins and the disk is in operation_generator.py.

After a restart, `reconstruct()` (run() does it first) records the volume
dirs found on disk; a pod added later claims them without setting them up
again, and housekeeping's `cleanup_orphaned_pods(keep)` tears down those of
pods that no longer exist.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Callable, Collection, Mapping

from kubelet.types import ObjectReference, Pod, object_ref
from kubelet.util import mountutil
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.volume import (
    ClaimNotReady,
    MountedVolume,
    Resolution,
    VolumeError,
    VolumeHost,
    VolumePlugin,
)
from kubelet.volumemanager.cache import (
    MountedEntry,
    PodMounts,
    PodToMount,
    PodVolumeStates,
    State,
    VolumeToMount,
)
from kubelet.volumemanager.hooks import ExternalPathPlugin, ResolvingPlugin
from kubelet.volumemanager.metrics import FailedReconstructions, force_clean_failed, orphan_sweep
from kubelet.volumemanager.operation_generator import (
    adopt,
    apply_resolution,
    set_up,
    tear_down,
    volume_to_mount,
)
from kubelet.volumemanager.operations import (
    INITIAL_BACKOFF,
    MAX_BACKOFF,
    MOUNT,
    UNMOUNT,
    OpKey,
)
from kubelet.volumemanager.reconstruct import FoundVolume, list_pod_uids, scan

log = logging.getLogger(__name__)

# (involved object ref, type, reason, message): EventRecorder.event's signature.
Recorder = Callable[[ObjectReference, str, str, str], None]

FAILED_MOUNT = "FailedMount"
# A claim not resolved yet (not bound yet, or the API server's node authorizer
# not yet aware of the new pod: 403 for a few hundred ms) is asked again soon:
# upstream's populator asks every 100 ms; exponential up to 2 s spares the API.
RESOLVE_BACKOFF = (0.1, 2.0)
# Until a pod has waited this long for its volumes (podAttachAndMountTimeout),
# a claim that is not ready (ClaimNotReady) is only logged, as upstream's
# populator does: the 403s above are routine for a new pod.
ATTACH_AND_MOUNT_TIMEOUT = 123.0
REMOUNT_PERIOD = 60.0
REMOUNT_JITTER = 0.2  # up to +20 %, so pods added together do not remount together


def _uid(pod: Pod) -> str:
    return str(pod["metadata"]["uid"])


class VolumeManagerImpl:
    """Implements kubelet.volumemanager.VolumeManager."""

    def __init__(
        self,
        host: VolumeHost,
        plugins: list[VolumePlugin],
        on_pod_ready: Callable[[str], None] = lambda uid: None,
        on_pod_unmounted: Callable[[str], None] = lambda uid: None,
        recorder: Recorder | None = None,
        clock: Clock = REAL_CLOCK,
        remount_period: float = REMOUNT_PERIOD,
        mountinfo: str = mountutil.MOUNTINFO,
        states: PodVolumeStates | None = None,
    ) -> None:
        self.host = host
        self.plugins = list(plugins)
        self._by_name = {p.name: p for p in self.plugins}
        self.on_pod_ready = on_pod_ready
        # Every volume of a removed pod is torn down (its API object may go).
        self.on_pod_unmounted = on_pod_unmounted
        self.recorder = recorder
        self.clock = clock
        self.remount_period = remount_period
        self.mountinfo = mountinfo
        self.states = states or PodVolumeStates(clock)
        self.dsw, self.asw, self.ops = self.states.dsw, self.states.asw, self.states.ops
        self._dirty: set[str] = set()
        self._timers: list[tuple[float, int, str]] = []
        self._seq = 0
        self._wake = asyncio.Event()
        self._unmount_waiters: dict[str, asyncio.Event] = {}
        self._reconstructed = False
        self._failed_reconstructions = FailedReconstructions()

    # ------------------------------------------------------------------ API

    def add_pod(self, pod: Pod) -> None:
        uid = _uid(pod)
        have = self.asw.pods.get(uid)
        if have is not None:
            have.release = False
        known = self.dsw.pods.get(uid)
        if known is not None:
            # Volumes are immutable; new labels or annotations reach
            # downwardAPI files through a remount (upstream remounts on every
            # pod sync; this is the part of that which can change content).
            old_meta, new_meta = known.pod.get("metadata", {}), pod.get("metadata", {})
            known.pod = pod
            if old_meta.get("labels") != new_meta.get("labels") or old_meta.get(
                "annotations"
            ) != new_meta.get("annotations"):
                self.remount(uid)
            return
        volumes: dict[str, VolumeToMount] = {}
        for spec in pod["spec"].get("volumes") or []:
            vol = volume_to_mount(self.plugins, self.host, uid, spec)
            volumes[vol.name] = vol
        entry = PodToMount(uid=uid, pod=pod, volumes=volumes, added_at=self.clock.monotonic())
        self.dsw.pods[uid] = entry
        for vol in volumes.values():
            if vol.unsupported:
                self._event(pod, vol.name, vol.unsupported)
            else:
                self._claim_found(entry, vol)
        entry.ready = not self._unmounted_names(entry)
        if not entry.ready or have is not None:
            self._mark_dirty(uid)

    def remove_pod(self, pod_uid: str) -> None:
        want = self.dsw.pods.pop(pod_uid, None)
        if want is not None:
            for vol in want.volumes.values():
                self.ops.succeeded((pod_uid, *vol.key), MOUNT)
        have = self.asw.pods.get(pod_uid)
        if have is not None:
            have.release = True
            self._mark_dirty(pod_uid)
        self._notify_unmounted(pod_uid)

    def unmounted_volumes(self, pod: Pod) -> list[str]:
        want = self.dsw.pods.get(_uid(pod))
        if want is None:
            return [v["name"] for v in pod["spec"].get("volumes") or []]
        names = self._unmounted_names(want)
        if names:
            want.ready = False  # the caller waits: tell it when that ends
        return names

    def get_mounted_volumes(self, pod_uid: str) -> Mapping[str, MountedVolume]:
        have = self.asw.pods.get(pod_uid)
        if have is None:
            return {}
        # By the pod's volume name (a claim's dir is named after its PV).
        return {
            e.volume.name: e.volume
            for e in have.entries.values()
            if e.state is State.MOUNTED and e.volume is not None
        }

    async def wait_for_unmount(self, pod_uid: str, timeout: float) -> bool:
        if self.states.volumes_torn_down(pod_uid):
            return True
        ev = self._unmount_waiters.setdefault(pod_uid, asyncio.Event())
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except TimeoutError:
            return self.states.volumes_torn_down(pod_uid)
        return True

    def remount(self, pod_uid: str) -> None:
        """Set up again the pod's volumes whose content follows API objects
        (requires_remount), e.g. on the pod's resync."""
        want = self.dsw.pods.get(pod_uid)
        if want is None:
            return
        for vol in want.volumes.values():
            if vol.plugin is not None and vol.plugin.requires_remount:
                vol.remount_requested = True
        self._mark_dirty(pod_uid)

    async def reconstruct(self) -> None:
        """Record the volume dirs found on disk (all pods) in the actual state."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, scan, self.host.root_dir, None, self.mountinfo)
        self._reconstructed = True
        n = 0
        for vols in found.values():
            for fv in vols or []:
                added = self._add_found(fv)
                n += added
                if added and fv.plugin_name:  # a subPath-only leftover is no volume
                    key = (fv.pod_uid, fv.plugin_name, fv.name)
                    self._failed_reconstructions.found(key, fv.plugin_name in self._by_name)
        log.info("volume manager: %d volume dirs found on disk in %d pods", n, len(found))

    async def cleanup_orphaned_pods(self, keep: Collection[str]) -> list[str]:
        """Housekeeping: tear down the volumes of every pod, on disk or mounted
        by this kubelet, that is neither in `keep` nor added. Returns the UIDs of
        pod dirs on disk that have no volumes left (their dirs may be removed)."""
        keep_set = set(keep)
        for uid, have in self.asw.pods.items():
            if uid not in keep_set and uid not in self.dsw.pods and not have.release:
                have.release = True
                self._mark_dirty(uid)
        loop = asyncio.get_running_loop()
        on_disk = await loop.run_in_executor(None, list_pod_uids, self.host.root_dir)
        orphaned = [u for u in on_disk if u not in keep_set and u not in self.dsw.pods]
        unknown = [u for u in orphaned if u not in self.asw.pods]
        if not unknown:
            orphan_sweep(len(orphaned), 0)
            return []
        found = await loop.run_in_executor(None, scan, self.host.root_dir, unknown, self.mountinfo)
        clean: list[str] = []
        for uid, vols in found.items():
            # Re-check: the pod may have been added while the disk was read.
            if uid in keep_set or uid in self.dsw.pods:
                continue
            for fv in vols or []:
                self._add_found(fv)
            orphan = self.asw.pods.get(uid)
            if orphan is None:
                if not vols:
                    clean.append(uid)
                continue
            orphan.release = True
            self._mark_dirty(uid)
        orphan_sweep(len(orphaned), len(clean))
        return clean

    # ---------------------------------------------------------- reconciler

    async def run(self, stop: asyncio.Event) -> None:
        if not self._reconstructed:
            try:
                await self.reconstruct()
            except Exception:  # the reconciler below must run all the same
                log.exception("volume manager: reading volume dirs on disk failed; going on")
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    self.reconcile()
                except Exception:  # a bug here must not stop all volume work
                    log.exception("volume manager: reconcile failed; next pass retries")
                timeout = None
                if self._timers:
                    timeout = max(0.0, self._timers[0][0] - self.clock.monotonic())
                waker = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait(
                    {waker, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                waker.cancel()
        finally:
            stopper.cancel()
            await self.ops.cancel_all()

    def poke(self) -> None:
        """Wake the reconciler (tests: after stepping a fake clock)."""
        self._wake.set()

    def reconcile(self) -> None:
        """One pass over the pods that changed or whose timers are due."""
        now = self.clock.monotonic()
        while self._timers and self._timers[0][0] <= now:
            self._dirty.add(heapq.heappop(self._timers)[2])
        dirty, self._dirty = self._dirty, set()
        for uid in dirty:
            self._reconcile_pod(uid, now)

    def _reconcile_pod(self, uid: str, now: float) -> None:
        want = self.dsw.pods.get(uid)
        have = self.asw.pods.get(uid)
        wanted_keys = set()
        # Until each claim is resolved, a dir found on disk may be one of them.
        unresolved = want is not None and any(
            not v.resolved and not v.unsupported for v in want.volumes.values()
        )
        if want is not None:
            for vol in want.volumes.values():
                if vol.unsupported:
                    continue
                wanted_keys.add(vol.key)
                entry = have.entries.get(vol.key) if have is not None else None
                if entry is not None and entry.state is State.FOUND:
                    self._claim_found(want, vol)
                if entry is not None and entry.state is State.MOUNTED:
                    assert vol.plugin is not None
                    if vol.plugin.requires_remount and (
                        vol.remount_requested or entry.remount_at <= now
                    ):
                        self._start_set_up(want, vol, now, remount=True)
                    continue
                self._start_set_up(want, vol, now, remount=False)
            self._check_ready(want)
        if have is None:
            return
        for key, entry in list(have.entries.items()):
            if key in wanted_keys:
                continue
            if not entry.plugin_name and want is not None and entry.name in want.volumes:
                continue  # subPath mounts of a wanted volume, found on disk
            if want is None and not have.release:
                continue  # found on disk; the pod may yet be added
            if unresolved and entry.state is State.FOUND:
                continue
            self._start_tear_down(uid, entry, now)
        if not have.entries:
            del self.asw.pods[uid]
            self._notify_unmounted(uid)

    # ------------------------------------------------------------- set-up

    def _start_set_up(
        self, want: PodToMount, vol: VolumeToMount, now: float, remount: bool
    ) -> None:
        # The same key as the tear-down of its dir: the two never overlap.
        key: OpKey = (want.uid, *vol.key)
        if self.ops.busy(key):
            return  # its completion marks the pod dirty again
        at = self.ops.retry_at(key, MOUNT)
        if at > now:
            self._schedule(want.uid, at)
            return
        vol.remount_requested = False
        if not vol.resolved:
            self.ops.start(key, self._resolve(key, want, vol))
            return
        self.ops.start(key, self._set_up(key, want, vol, remount))

    async def _set_up(
        self, key: OpKey, want: PodToMount, vol: VolumeToMount, remount: bool
    ) -> None:
        mounted: MountedVolume | None = None
        error, how = "", (VolumeError.operation, FAILED_MOUNT)
        try:
            mounted = await set_up(want.pod, vol, remount)
        except asyncio.CancelledError:
            self.ops.finish(key)
            raise
        except VolumeError as err:
            error, how = str(err), (err.operation, err.reason)
        except Exception as err:  # a plugin bug must not kill the reconciler
            log.exception("volume %s of pod %s: set-up raised", vol.name, want.uid)
            error = str(err) or type(err).__name__
        self.ops.observe(key, MOUNT, error, self.ops.finish(key))
        self._set_up_done(key, want, vol, mounted if not error else None, error, how)

    def _set_up_done(
        self,
        key: OpKey,
        want: PodToMount,
        vol: VolumeToMount,
        mounted: MountedVolume | None,
        error: str,
        how: tuple[str, str],  # the failed operation, the event's reason
    ) -> None:
        uid = want.uid
        still_wanted = self.dsw.pods.get(uid) is want
        have = self.asw.pods.setdefault(uid, PodMounts(release=not still_wanted))
        entry = have.entries.get(vol.key)
        if mounted is not None:
            self.ops.succeeded(key, MOUNT)
            if entry is None:
                entry = MountedEntry(vol.plugin_name, vol.key[1], vol.dir, State.MOUNTED)
                have.entries[vol.key] = entry
            entry.state, entry.volume, entry.dir = State.MOUNTED, mounted, vol.dir
            # Its tear-down now cleans any subPath mounts found on disk for it.
            have.entries.pop(("", vol.name), None)
            assert vol.plugin is not None
            if vol.plugin.requires_remount:
                entry.remount_at = self.clock.monotonic() + self.remount_period * (
                    1 + random.random() * REMOUNT_JITTER
                )
                self._schedule(uid, entry.remount_at)
            if still_wanted:
                self._check_ready(want)
        else:
            if entry is None and not isinstance(vol.plugin, ExternalPathPlugin):
                # It may have left a dir or a mount: tear that down when unwanted.
                entry = MountedEntry(vol.plugin_name, vol.key[1], vol.dir, State.UNCERTAIN)
                have.entries[vol.key] = entry
            if still_wanted:
                until = self._mount_failed(key, want, vol, error, how=how)
                if entry is not None and entry.state is State.MOUNTED:
                    entry.remount_at = until  # a failed remount is retried
            else:
                self.ops.succeeded(key, MOUNT)
        self._mark_dirty(uid)

    def _mount_failed(
        self,
        key: OpKey,
        want: PodToMount,
        vol: VolumeToMount,
        error: str,
        backoff: tuple[float, float] = (INITIAL_BACKOFF, MAX_BACKOFF),
        how: tuple[str, str] = (VolumeError.operation, FAILED_MOUNT),
        event: bool = True,
    ) -> float:
        """Back-off, log line and (unless told not to) event, FailedMount or as
        `how` says, naming the PV of a claim resolved to one, as upstream does;
        returns the retry time."""
        b = self.ops.failed(key, MOUNT, error, *backoff)
        name = vol.dir_name or vol.name
        operation, reason = how
        log.warning(
            "%s failed for volume %r of pod %s (retry in %.1fs): %s",
            operation, name, want.uid, b.duration, error,
        )  # fmt: skip
        if event:
            self._event(want.pod, name, error, operation, reason)
        self._schedule(want.uid, b.until)
        return b.until

    # ---------------------------------------------------------- resolution

    async def _resolve(self, key: OpKey, want: PodToMount, vol: VolumeToMount) -> None:
        """Ask a ResolvingPlugin which plugin serves the volume; the next pass
        sets it up there (or adopts the dir found on disk for it)."""
        plugin = vol.plugin
        assert isinstance(plugin, ResolvingPlugin)
        res: Resolution | None = None
        error, quiet = "", False
        try:
            res = await plugin.resolve(want.pod, vol.spec)
        except asyncio.CancelledError:
            self.ops.finish(key)
            raise
        except VolumeError as err:
            error = str(err)
            waited = self.clock.monotonic() - want.added_at
            quiet = isinstance(err, ClaimNotReady) and waited < ATTACH_AND_MOUNT_TIMEOUT
        except Exception as err:  # a plugin bug must not kill the reconciler: retried
            log.exception("volume %s of pod %s: resolve raised", vol.name, want.uid)
            error = str(err) or type(err).__name__
        self.ops.finish(key)
        if self.dsw.pods.get(want.uid) is not want:
            self.ops.succeeded(key, MOUNT)
            return
        if not error and res is not None:
            error = apply_resolution(self._by_name, self.host, want.uid, want.volumes, vol, res)
        if error:
            self._mount_failed(key, want, vol, error, RESOLVE_BACKOFF, event=not quiet)
        else:
            self.ops.succeeded(key, MOUNT)
            vol.resolved = True
            self._claim_found(want, vol)
        self._mark_dirty(want.uid)

    # ----------------------------------------------------------- tear-down

    def _start_tear_down(self, uid: str, entry: MountedEntry, now: float) -> None:
        key: OpKey = (uid, entry.plugin_name, entry.name)
        if self.ops.busy(key):
            return
        at = self.ops.retry_at(key, UNMOUNT)
        if at > now:
            self._schedule(uid, at)
            return
        self.ops.start(key, self._tear_down(key, uid, entry))

    async def _tear_down(self, key: OpKey, uid: str, entry: MountedEntry) -> None:
        plugin = self._by_name.get(entry.plugin_name)
        forced = self._failed_reconstructions.tear_down_started(key)
        error = ""
        try:
            await tear_down(plugin, uid, entry, self.host.root_dir)
        except asyncio.CancelledError:
            self.ops.finish(key)
            raise
        except VolumeError as err:
            error = str(err)
        except Exception as err:  # a plugin bug must not kill the reconciler: retried
            log.exception("volume %s of pod %s: tear-down raised", entry.name, uid)
            error = str(err) or type(err).__name__
        self.ops.observe(key, UNMOUNT, error, self.ops.finish(key))
        have = self.asw.pods.get(uid)
        if error:
            if forced:
                force_clean_failed()
            b = self.ops.failed(key, UNMOUNT, error)
            log.warning(
                "UnmountVolume.TearDown failed for volume %r of pod %s (retry in %.1fs): %s",
                entry.name, uid, b.duration, error,
            )  # fmt: skip
            self._schedule(uid, b.until)
        else:
            self.ops.forget(key)
            if have is not None and have.entries.get(entry.key) is entry:
                del have.entries[entry.key]
        self._mark_dirty(uid)
        self._notify_unmounted(uid)

    # ------------------------------------------------------------- helpers

    def _add_found(self, fv: FoundVolume) -> int:
        have = self.asw.pods.setdefault(fv.pod_uid, PodMounts())
        key = (fv.plugin_name, fv.name)
        if key in have.entries:
            return 0
        have.entries[key] = MountedEntry(
            fv.plugin_name, fv.name, fv.dir, State.FOUND, fstype=fv.fstype
        )
        want = self.dsw.pods.get(fv.pod_uid)
        if want is not None:
            self._mark_dirty(fv.pod_uid)
        return 1

    def _claim_found(self, want: PodToMount, vol: VolumeToMount) -> None:
        have = self.asw.pods.get(want.uid)
        entry = have.entries.get(vol.key) if have is not None else None
        if entry is None or entry.state is not State.FOUND or vol.plugin is None:
            return
        adopted = adopt(vol, entry)
        if adopted is None:
            return
        assert have is not None
        entry.state = State.MOUNTED
        have.entries.pop(("", vol.name), None)
        entry.volume = adopted
        if vol.plugin.requires_remount:
            # Its objects may have changed while the kubelet was down.
            vol.remount_requested = True
            self._mark_dirty(want.uid)
        log.info("volume %s of pod %s adopted from disk", vol.name, want.uid)

    def _unmounted_names(self, want: PodToMount) -> list[str]:
        return [
            vol.name
            for vol in want.volumes.values()
            if vol.unsupported or self.asw.mounted(want.uid, vol.key) is None
        ]

    def _check_ready(self, want: PodToMount) -> None:
        if want.ready or self._unmounted_names(want):
            return
        want.ready = True
        self.on_pod_ready(want.uid)

    def _notify_unmounted(self, uid: str) -> None:
        if self.states.volumes_torn_down(uid):
            ev = self._unmount_waiters.pop(uid, None)
            if ev is not None:
                ev.set()
            self.on_pod_unmounted(uid)

    def volumes_torn_down(self, pod_uid: str) -> bool:
        """The pod is not wanted and none of its volumes is left mounted
        (podVolumesExist upstream, negated)."""
        return self.states.volumes_torn_down(pod_uid)

    def _event(
        self,
        pod: Pod,
        volume: str,
        error: str,
        op: str = VolumeError.operation,
        reason: str = FAILED_MOUNT,
    ) -> None:
        if self.recorder is None:
            return
        msg = f'{op} failed for volume "{volume}" : {error}'
        self.recorder(object_ref(pod), "Warning", reason, msg)

    def _mark_dirty(self, uid: str) -> None:
        self._dirty.add(uid)
        self._wake.set()

    def _schedule(self, uid: str, at: float) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (at, self._seq, uid))
        self._wake.set()
