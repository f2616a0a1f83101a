"""Pods' user namespace mappings (pkg/kubelet/userns/userns_manager.go).

Every `hostUsers: false` pod gets `ids_per_pod` host IDs of its own, mapped to
container IDs 0..ids_per_pod-1 for both uids and gids. A bitmap over the
kubelet's range (one bit a pod slot) says which slots are taken; each pod's
mapping is kept in `<root-dir>/pods/<uid>/userns` (upstream's JSON), so a
restarted kubelet gives running pods the range they run with and never hands
it to another pod. A slot is freed when the pod has terminated (sync of a
terminated pod) or when housekeeping finds no pod that owns it.

The files are the kubelet's own, but they are read as untrusted: not through
a link, bounded in size, every number checked against the range, and a range
two pods claim is refused (the kubelet does not start), as upstream does.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import random
import stat
from collections.abc import Callable, Iterable
from typing import Protocol

from kubelet.cri.api import api_pb2 as pb
from kubelet.types import Pod, uid
from kubelet.userns.idrange import IDRange
from kubelet.util import filesystem
from kubelet.util.atomicfile import write_atomic

log = logging.getLogger(__name__)

MAPPINGS_FILE = "userns"
_MAX_FILE = 64 * 1024
_UINT32_MAX = (1 << 32) - 1


class UsernsError(ValueError):
    """The pod cannot get its user namespace; the message is upstream's."""


class HandlerFeatures(Protocol):
    def handler_supports_user_namespaces(self, handler: str) -> bool:
        """What the runtime's Status said of `handler` (False when it named no
        handlers at all); LookupError when it named others but not this one."""
        ...


class UserNamespaces(Protocol):
    """What kuberuntime asks of the manager."""

    async def get_or_create(self, pod: Pod, runtime_handler: str) -> pb.UserNamespace | None: ...


class Bitmap:
    """Slots 0..size-1; `allocate_next` picks a free one at random, as
    upstream's allocator does, so slots are not reused in a guessable order."""

    def __init__(self, size: int, rand: random.Random | None = None) -> None:
        self._bits = bytearray(size)
        self._free = size
        self._rand = rand or random.SystemRandom()

    def __len__(self) -> int:
        return len(self._bits)

    @property
    def free(self) -> int:
        return self._free

    def has(self, i: int) -> bool:
        return bool(self._bits[i])

    def allocate(self, i: int) -> None:
        if not self._bits[i]:
            self._bits[i] = 1
            self._free -= 1

    def allocate_next(self) -> int | None:
        if self._free == 0:
            return None
        start = self._rand.randrange(len(self._bits))
        i = self._bits.find(0, start)
        if i < 0:
            i = self._bits.find(0, 0, start)
        self.allocate(i)
        return i

    def release(self, i: int) -> None:
        if self._bits[i]:
            self._bits[i] = 0
            self._free += 1


def _mapping_json(host_id: int, length: int) -> bytes:
    one = [{"hostId": host_id, "containerId": 0, "length": length}]
    return json.dumps({"uidMappings": one, "gidMappings": one}, separators=(",", ":")).encode()


def _write_mappings(pod_dir: str, host_id: int, length: int) -> None:
    filesystem.mkdir_all(pod_dir, 0o750)
    write_atomic(os.path.join(pod_dir, MAPPINGS_FILE), _mapping_json(host_id, length))


def _id_mapping(raw: object) -> tuple[int, int, int]:
    """(hostId, containerId, length) of one JSON mapping; ValueError otherwise."""
    if not isinstance(raw, dict):
        raise ValueError("a mapping is not an object")
    out = []
    for key in ("hostId", "containerId", "length"):
        v = raw.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _UINT32_MAX:
            raise ValueError(f"{key} {v!r} is not a uint32")
        out.append(v)
    return out[0], out[1], out[2]


def parse_mappings(content: bytes) -> tuple[int, int]:
    """(hostId, length) of a mappings file the kubelet wrote; UsernsError with
    upstream's reasons for anything else."""
    try:
        doc = json.loads(content)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        uids = [_id_mapping(m) for m in doc.get("uidMappings") or []]
        gids = [_id_mapping(m) for m in doc.get("gidMappings") or []]
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError included
        raise UsernsError(f"invalid user namespace mappings file: {err}") from err
    bad = "invalid user namespace configuration: "
    if len(uids) != 1:
        raise UsernsError(bad + "no more than one mapping allowed.")
    if len(uids) != len(gids):
        raise UsernsError(bad + "GID and UID mappings should be identical.")
    if uids[0] != gids[0]:
        raise UsernsError(bad + "GID and UID mapping should be identical")
    if uids[0][1] != 0:
        raise UsernsError(bad + "UID 0 must be mapped")
    return uids[0][0], uids[0][2]


def read_mappings_file(pod_dir: str) -> bytes | None:
    """The pod's mappings file, None when there is none. Never through a link,
    only a regular file, at most 64 KiB."""
    path = os.path.join(pod_dir, MAPPINGS_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UsernsError(f"{path} is a symbolic link") from err
        raise UsernsError(f"reading {path}: {err}") from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsernsError(f"{path} is not a regular file")
        data = os.read(fd, _MAX_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_FILE:
        raise UsernsError(f"{path} is larger than {_MAX_FILE} bytes")
    return data


def list_pod_dirs(pods_dir: str) -> list[str]:
    """The directories under <root>/pods (listPodsFromDisk); links are not."""
    try:
        with os.scandir(pods_dir) as it:
            return [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _handler_problem(handlers: HandlerFeatures, handler: str) -> str | None:
    msg = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
    if handler:
        msg = (
            "can't set `spec.hostUsers: false`, RuntimeClass handler "
            f'"{handler}" does not support user namespaces'
        )
    try:
        ok = handlers.handler_supports_user_namespaces(handler)
    except LookupError:
        return f'{msg}: the handler "{handler}" is not known'
    return None if ok else msg


class UsernsManager:
    def __init__(
        self,
        root_dir: str,
        rng: IDRange,
        handlers: HandlerFeatures,
        *,
        enabled: bool = True,
        rand: random.Random | None = None,
    ) -> None:
        self.pods_dir = os.path.join(root_dir, "pods")
        self.enabled = enabled  # the UserNamespacesSupport gate
        self.handlers = handlers
        self.ids_per_pod = rng.ids_per_pod
        self._off = rng.first // rng.ids_per_pod  # slot 0 is this multiple of ids_per_pod
        self._used = Bitmap(rng.length // rng.ids_per_pod, rand)
        self._by_pod: dict[str, int] = {}  # pod uid -> first host ID

    # --------------------------------------------------------------- state
    def pod_dir(self, pod_uid: str) -> str:
        return os.path.join(self.pods_dir, filesystem.component(pod_uid, "pod uid"))

    def allocated(self, pod_uid: str) -> int | None:
        """The first host ID of the pod's range, None when it has none."""
        return self._by_pod.get(pod_uid)

    @property
    def free_slots(self) -> int:
        return self._used.free

    def _record(self, pod_uid: str, host_id: int, length: int) -> None:
        """Take [host_id, host_id+length) for the pod, as a file said (record)."""
        if length != self.ids_per_pod:
            raise UsernsError(f"wrong user namespace length {length}")
        if host_id % self.ids_per_pod:
            raise UsernsError(f"wrong user namespace offset specified {host_id}")
        prev = self._by_pod.get(pod_uid)
        if prev is not None and prev != host_id:
            raise UsernsError(f'different user namespace range already used by pod "{pod_uid}"')
        index = host_id // self.ids_per_pod - self._off
        if not 0 <= index < len(self._used):
            raise UsernsError(f"id {host_id} is out of range")
        if prev is None and self._used.has(index):
            raise UsernsError(f'range picked for pod "{pod_uid}" already taken')
        self._used.allocate(index)
        self._by_pod[pod_uid] = host_id

    def recover(self) -> None:
        """Record the range of every pod dir that has a mappings file (at start,
        before any pod is synced). UsernsError: the kubelet must not start."""
        if not self.enabled:
            return
        for pod_uid in list_pod_dirs(self.pods_dir):
            try:
                content = read_mappings_file(self.pod_dir(pod_uid))
                if content:
                    self._record(pod_uid, *parse_mappings(content))
            except ValueError as err:  # UsernsError, or a dir name not a path component
                raise UsernsError(
                    f"create user namespace manager: record pod mappings: pod {pod_uid}: {err}"
                ) from err
        log.info(
            "User namespaces: %d pod ranges recovered, %d free",
            len(self._by_pod),
            self._used.free,
        )

    # ------------------------------------------------------------- pod use
    async def get_or_create(self, pod: Pod, runtime_handler: str) -> pb.UserNamespace | None:
        """GetOrCreateUserNamespaceMappings: what the sandbox and its containers
        are told of user namespaces (None: nothing, with the gate off). The
        file I/O (an fsync) runs off the event loop; the slot is taken before
        it, so no other pod can get it meanwhile."""
        host_users = pod["spec"].get("hostUsers")
        if host_users is None:
            return pb.UserNamespace(mode=pb.NODE) if self.enabled else None
        if not self.enabled:
            raise UsernsError(
                'the feature gate "UserNamespacesSupport" is disabled: can\'t set spec.HostUsers'
            )
        if host_users:
            return pb.UserNamespace(mode=pb.NODE)
        problem = _handler_problem(self.handlers, runtime_handler)
        if problem:
            raise UsernsError(problem)
        host_id = await self._pod_range(uid(pod))
        m = pb.IDMapping(host_id=host_id, container_id=0, length=self.ids_per_pod)
        return pb.UserNamespace(mode=pb.POD, uids=[m], gids=[m])

    async def _pod_range(self, pod_uid: str) -> int:
        host_id = self._by_pod.get(pod_uid)
        if host_id is not None:
            return host_id
        d = self.pod_dir(pod_uid)
        loop = asyncio.get_running_loop()
        content = await loop.run_in_executor(None, read_mappings_file, d)
        host_id = self._by_pod.get(pod_uid)  # taken meanwhile by another sync of the pod
        if host_id is not None:
            return host_id
        if content:
            try:
                self._record(pod_uid, *parse_mappings(content))
            except UsernsError as err:
                raise UsernsError(f"user namespace: {err}") from err
            return self._by_pod[pod_uid]
        index = self._used.allocate_next()
        if index is None:
            raise UsernsError(
                "create user namespace: could not find an empty slot to allocate a user namespace"
            )
        host_id = (index + self._off) * self.ids_per_pod
        self._by_pod[pod_uid] = host_id
        try:
            await loop.run_in_executor(None, _write_mappings, d, host_id, self.ids_per_pod)
        except OSError as err:
            self.release(pod_uid)
            raise UsernsError(f"create user namespace: {err}") from err
        log.info("Pod %s: user namespace host IDs %d+%d", pod_uid, host_id, self.ids_per_pod)
        return host_id

    def release(self, pod_uid: str) -> None:
        """Free the pod's range and remove its file (the pod has terminated)."""
        host_id = self._by_pod.pop(pod_uid, None)
        if host_id is None:
            return
        try:
            os.unlink(os.path.join(self.pod_dir(pod_uid), MAPPINGS_FILE))
        except FileNotFoundError:
            pass
        except OSError as err:  # the range is free in memory; the file goes with the dir
            log.warning("Pod %s: removing its user namespace file: %s", pod_uid, err)
        self._used.release(host_id // self.ids_per_pod - self._off)

    def cleanup_orphans(self, known: set[str], running: Callable[[], Iterable[str]]) -> None:
        """Free the ranges of pods neither a source, a worker nor the runtime
        knows (CleanupOrphanedPodUsernsAllocations). `running` is asked only
        when some range belongs to a pod outside `known`."""
        stray = [u for u in self._by_pod if u not in known]
        if not stray:
            return
        alive = set(running())
        for u in stray:
            if u not in alive:
                log.info("Pod %s is gone: its user namespace range is freed", u)
                self.release(u)
