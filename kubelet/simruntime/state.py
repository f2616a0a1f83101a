"""In-memory runtime state: sandboxes, containers, images and their transitions."""

from __future__ import annotations

import asyncio
import datetime
import io
import ipaddress
import itertools
import json
import os
import secrets
import stat
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import json_format

from kubelet.cri.api import api_pb2 as pb
from kubelet.simruntime.behavior import FOREVER, Behavior, parse

RUNNING, EXITED, CREATED = pb.CONTAINER_RUNNING, pb.CONTAINER_EXITED, pb.CONTAINER_CREATED
POD_UID_LABEL = "io.kubernetes.pod.uid"


class SimError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # a grpc.StatusCode name
        self.message = message


def _frame(item: bytes) -> bytes:
    """`item` as field 1 (length-delimited) of a List response, ready to concatenate."""
    n = len(item)
    head = bytearray(b"\x0a")
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            head.append(b | 0x80)
        else:
            head.append(b)
            break
    return bytes(head) + item


def now_ns() -> int:
    return time.time_ns()


def new_id() -> str:
    return secrets.token_hex(32)


@dataclass
class Sandbox:
    id: str
    config: pb.PodSandboxConfig
    created_at: int
    ip: str
    runtime_handler: str
    state: pb.PodSandboxState = pb.SANDBOX_READY
    containers: set[str] = field(default_factory=set)
    _framed: bytes | None = None  # this sandbox inside a List response, until it changes

    def framed(self) -> bytes:
        if self._framed is None:
            self._framed = _frame(self.summary().SerializeToString())
        return self._framed

    def summary(self) -> pb.PodSandbox:
        c = self.config
        return pb.PodSandbox(
            id=self.id,
            metadata=c.metadata,
            state=self.state,
            created_at=self.created_at,
            labels=c.labels,
            annotations=c.annotations,
            runtime_handler=self.runtime_handler,
        )

    def status(self) -> pb.PodSandboxStatus:
        c = self.config
        host_net = (
            c.linux.security_context.namespace_options.network == pb.NODE
            if c.HasField("linux")
            else False
        )
        return pb.PodSandboxStatus(
            id=self.id,
            metadata=c.metadata,
            state=self.state,
            created_at=self.created_at,
            network=pb.PodSandboxNetworkStatus(ip="" if host_net else self.ip),
            linux=pb.LinuxPodSandboxStatus(
                namespaces=pb.Namespace(
                    options=c.linux.security_context.namespace_options
                    if c.HasField("linux")
                    else None
                )
            ),
            labels=c.labels,
            annotations=c.annotations,
            runtime_handler=self.runtime_handler,
        )


@dataclass
class Container:
    id: str
    sandbox_id: str
    config: pb.ContainerConfig
    image_ref: str
    image_id: str
    log_path: str
    behavior: Behavior
    created_at: int
    state: pb.ContainerState = CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    printed: int = 0  # output lines of this run written so far
    report_user: bool = False  # status carries `user` (Options.supplemental_groups_policy)
    _framed: bytes | None = None

    def framed(self) -> bytes:
        if self._framed is None:
            self._framed = _frame(self.summary().SerializeToString())
        return self._framed

    def pod_uid(self) -> str:
        return self.config.labels.get(POD_UID_LABEL, "")

    def summary(self) -> pb.Container:
        c = self.config
        return pb.Container(
            id=self.id,
            pod_sandbox_id=self.sandbox_id,
            metadata=c.metadata,
            image=c.image,
            image_ref=self.image_ref,
            state=self.state,
            created_at=self.created_at,
            labels=c.labels,
            annotations=c.annotations,
            image_id=self.image_id,
        )

    def status(self) -> pb.ContainerStatus:
        c = self.config
        return pb.ContainerStatus(
            id=self.id,
            metadata=c.metadata,
            state=self.state,
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            image=c.image,
            image_ref=self.image_ref,
            reason=self.reason,
            message=self.message,
            labels=c.labels,
            annotations=c.annotations,
            mounts=c.mounts,
            log_path=self.log_path,
            resources=pb.ContainerResources(linux=c.linux.resources)
            if c.HasField("linux")
            else None,
            image_id=self.image_id,
            user=self.user() if self.report_user else None,
        )

    def user(self) -> pb.ContainerUser:
        """The identity the process runs as: runAsUser / runAsGroup (0 without),
        its primary group first among the supplemental ones (no image groups
        here: a simulated image has no /etc/group)."""
        sc = self.config.linux.security_context
        uid = sc.run_as_user.value if sc.HasField("run_as_user") else 0
        gid = sc.run_as_group.value if sc.HasField("run_as_group") else 0
        groups = list(dict.fromkeys([gid, *sc.supplemental_groups]))
        return pb.ContainerUser(
            linux=pb.LinuxContainerUser(uid=uid, gid=gid, supplemental_groups=groups)
        )

    def cancel_timers(self) -> None:
        for t in self.timers:
            t.cancel()
        self.timers.clear()


@dataclass
class Options:
    pod_cidr: str = "10.88.0.0/16"
    pull_delay: float = 0.0
    missing_tags: tuple[str, ...] = ("missing",)
    # What RuntimeConfig reports: "cgroupfs", "systemd", or "" to answer
    # UNIMPLEMENTED as containerd 1.6 does.
    cgroup_driver: str = "cgroupfs"
    # CheckpointContainer: writes an archive; False answers UNIMPLEMENTED as
    # containerd 1.6 (which does not have the method) does.
    checkpoint: bool = True
    # UpdatePodSandboxResources (CRI v1.34): kept in the sandbox's config;
    # False answers UNIMPLEMENTED as containerd 1.6 does.
    sandbox_resources: bool = True
    # Status's features.supplemental_groups_policy; with it, container statuses
    # carry the user the process runs as (False: neither, as containerd 1.6).
    supplemental_groups_policy: bool = True
    # The image filesystem's mountpoint in ImageFsInfo: a directory that exists,
    # since a kubelet statfs()s it for its image stats (upstream's fails its
    # /stats/summary without); the command sets its socket's directory.
    image_fs: str = "/"


def normalize_image(ref: str) -> str:
    """docker.io/library defaults, as containerd stores references."""
    name, tag = ref, ""
    if "@" in ref:
        return ref
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
    tag = tag or "latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return f"{name}:{tag}"


def rfc3339nano(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ns % 1_000_000_000:09d}Z"


class Runtime:
    def __init__(self, opts: Options, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.opts = opts
        self.loop = loop or asyncio.get_event_loop()
        self.sandboxes: dict[str, Sandbox] = {}
        self.containers: dict[str, Container] = {}
        self.by_pod_uid: dict[str, set[str]] = {}
        self.sandboxes_by_pod_uid: dict[str, set[str]] = {}
        self.images: dict[str, pb.Image] = {}
        net = ipaddress.ip_network(opts.pod_cidr, strict=False)
        self._ips = itertools.islice(net.hosts(), 1, None)  # .1 is the gateway
        self.generation = 0  # bumps on every change; keys the List caches
        self.listeners: list[Callable[[pb.ContainerEventResponse], None]] = []

    # -- helpers
    def _changed(self) -> None:
        self.generation += 1

    def _emit(self, c: Container, etype: pb.ContainerEventType) -> None:
        if not self.listeners:
            return
        sb = self.sandboxes.get(c.sandbox_id)
        ev = pb.ContainerEventResponse(
            container_id=c.id,
            container_event_type=etype,
            created_at=now_ns(),
            pod_sandbox_status=sb.status() if sb else None,
            containers_statuses=[
                self.containers[i].status()
                for i in (sb.containers if sb else ())
                if i in self.containers
            ],
        )
        for fn in list(self.listeners):
            fn(ev)

    def _sandbox(self, sid: str) -> Sandbox:
        if not sid:
            raise SimError("INVALID_ARGUMENT", "PodSandboxId should not be empty")
        sb = self.sandboxes.get(sid)
        if sb is None:
            raise SimError(
                "NOT_FOUND", f'an error occurred when try to find sandbox "{sid}": not found'
            )
        return sb

    def _container(self, cid: str) -> Container:
        if not cid:
            raise SimError("INVALID_ARGUMENT", "ContainerId should not be empty")
        c = self.containers.get(cid)
        if c is None:
            raise SimError(
                "NOT_FOUND", f'an error occurred when try to find container "{cid}": not found'
            )
        return c

    # -- sandboxes
    def run_pod_sandbox(self, config: pb.PodSandboxConfig, handler: str) -> str:
        md = config.metadata
        if not config.HasField("metadata") or not md.name or not md.uid or not md.namespace:
            raise SimError(
                "INVALID_ARGUMENT", "sandbox config must include metadata name, uid and namespace"
            )
        if config.log_directory:
            os.makedirs(config.log_directory, exist_ok=True)
        sid = new_id()
        self.sandboxes[sid] = Sandbox(sid, config, now_ns(), str(next(self._ips)), handler)
        self.sandboxes_by_pod_uid.setdefault(md.uid, set()).add(sid)
        self._changed()
        return sid

    def stop_pod_sandbox(self, sid: str) -> None:
        sb = self.sandboxes.get(sid)
        if sb is None:
            return  # idempotent, as the CRI requires
        for cid in list(sb.containers):
            c = self.containers.get(cid)
            if c is not None and c.state == RUNNING:
                self._exit(c, 137, "Error", "")
        if sb.state != pb.SANDBOX_NOTREADY:
            sb.state = pb.SANDBOX_NOTREADY
            sb._framed = None
            self._changed()

    def remove_pod_sandbox(self, sid: str) -> None:
        sb = self.sandboxes.get(sid)
        if sb is None:
            return
        self.stop_pod_sandbox(sid)
        for cid in list(sb.containers):
            self.remove_container(cid)
        del self.sandboxes[sid]
        ids = self.sandboxes_by_pod_uid.get(sb.config.metadata.uid)
        if ids is not None:
            ids.discard(sid)
            if not ids:
                del self.sandboxes_by_pod_uid[sb.config.metadata.uid]
        self._changed()

    # -- containers
    def create_container(self, sid: str, config: pb.ContainerConfig) -> str:
        sb = self._sandbox(sid)
        if not config.HasField("metadata") or not config.metadata.name:
            raise SimError("INVALID_ARGUMENT", "container config must include metadata with a name")
        if sb.state != pb.SANDBOX_READY:
            raise SimError("UNKNOWN", f"sandbox {sid} is not ready: cannot create container")
        for cid in sb.containers:
            other = self.containers[cid]
            if (other.config.metadata.name, other.config.metadata.attempt) == (
                config.metadata.name,
                config.metadata.attempt,
            ):
                raise SimError(
                    "UNKNOWN",
                    f'failed to reserve container name "{config.metadata.name}_'
                    f'{config.metadata.attempt}": '
                    f'name is reserved for "{cid}"',
                )
        for d in config.devices:
            _check_device(d.host_path)
        ref = normalize_image(config.image.image)
        img = self.images.get(ref) or self._image_by_id(config.image.image)
        if img is None:
            raise SimError("NOT_FOUND", f'failed to get image "{config.image.image}": not found')
        log_path = os.path.join(sb.config.log_directory, config.log_path) if config.log_path else ""
        try:
            behavior = parse(
                list(config.command),
                list(config.args),
                config.annotations.get("sim.kubelet.io/behavior"),
            )
        except ValueError:  # a command we cannot read still runs forever
            behavior = Behavior()
        cid = new_id()
        c = Container(
            cid,
            sid,
            config,
            img.repo_digests[0] if img.repo_digests else img.id,
            img.id,
            log_path,
            behavior,
            now_ns(),
            report_user=self.opts.supplemental_groups_policy,
        )
        self.containers[cid] = c
        sb.containers.add(cid)
        uid = c.pod_uid()
        if uid:
            self.by_pod_uid.setdefault(uid, set()).add(cid)
        self._changed()
        self._emit(c, pb.CONTAINER_CREATED_EVENT)
        return cid

    def start_container(self, cid: str) -> None:
        c = self._container(cid)
        if c.state != CREATED:
            raise SimError(
                "UNKNOWN",
                f"container {cid} is in {pb.ContainerState.Name(c.state)} state, not CREATED",
            )
        sb = self.sandboxes.get(c.sandbox_id)
        if sb is None or sb.state != pb.SANDBOX_READY:
            raise SimError("UNKNOWN", f"sandbox of container {cid} is not ready")
        if c.log_path:
            os.makedirs(os.path.dirname(c.log_path), exist_ok=True)
            open(c.log_path, "ab").close()
        c.state = RUNNING
        c._framed = None
        c.started_at = now_ns()
        b = c.behavior
        c.printed = 0
        self._print_until(c, 0.0)
        for at in sorted({s.at for s in b.output if 0 < s.at <= b.exit_after}):
            c.timers.append(self.loop.call_later(at, self._print_until, c, at))
        if b.repeat_every > 0:
            c.timers.append(self.loop.call_later(0, self._repeat, c))
        if b.exit_after != FOREVER:
            c.timers.append(self.loop.call_later(b.exit_after, self._natural_exit, c))
        self._changed()
        self._emit(c, pb.CONTAINER_STARTED_EVENT)

    def _log(self, c: Container, line: str, stream: str = "stdout") -> None:
        if not c.log_path or c.state != RUNNING:
            return
        try:
            with open(c.log_path, "ab") as fh:
                fh.write(f"{rfc3339nano(now_ns())} {stream} F {line}\n".encode())
        except OSError:
            pass  # the log directory went away with the pod: nothing to write to

    def _repeat(self, c: Container) -> None:
        if c.state != RUNNING:
            return
        self._log(c, c.behavior.repeat_line)
        c.timers.append(self.loop.call_later(c.behavior.repeat_every, self._repeat, c))

    def _print_until(self, c: Container, t: float) -> None:
        """Write, in order, the output lines due t seconds after the start. Lines
        due when the script exits are written first, as a shell would."""
        steps = c.behavior.output
        while c.printed < len(steps) and steps[c.printed].at <= t:
            self._log(c, steps[c.printed].line)
            c.printed += 1

    def _natural_exit(self, c: Container) -> None:
        if c.state == RUNNING:
            self._print_until(c, c.behavior.exit_after)
            code = c.behavior.exit_code
            self._exit(c, code, "Completed" if code == 0 else "Error", "")

    def _exit(self, c: Container, code: int, reason: str, message: str) -> None:
        c.cancel_timers()
        c.state = EXITED
        c._framed = None
        c.finished_at = now_ns()
        c.exit_code = code
        c.reason = reason
        c.message = message
        self._changed()
        self._emit(c, pb.CONTAINER_STOPPED_EVENT)

    async def stop_container(self, cid: str, timeout: int) -> None:
        c = self._container(cid)
        if c.state == CREATED:
            # Never started: it becomes exited without a process to signal.
            self._exit(c, 0, "", "")
            return
        if c.state != RUNNING:
            return
        if c.behavior.ignore_sigterm and timeout > 0:
            # SIGTERM is ignored: the runtime waits the grace period, then kills.
            deadline = time.monotonic() + timeout
            while c.state == RUNNING and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if c.state == RUNNING:
                self._exit(c, 137, "Error", "")
            return
        # A shell that does not trap TERM dies of it: 128 + 15.
        self._exit(c, 143 if timeout > 0 else 137, "Error", "")

    def checkpoint_container(self, cid: str, location: str) -> None:
        """An archive laid out as CRIU-based runtimes write one (the files
        upstream's node e2e test looks for), with the container's config."""
        c = self._container(cid)
        if c.state != RUNNING:
            raise SimError("FAILED_PRECONDITION", f"container {cid} is not running")
        if not os.path.isabs(location):
            raise SimError("INVALID_ARGUMENT", f"checkpoint location {location!r} is not absolute")
        spec = json_format.MessageToJson(c.config).encode()
        meta = json.dumps({"id": c.id, "name": c.config.metadata.name, "image": c.image_ref})
        try:
            with tarfile.open(location, "w") as tar:
                for name, data in (
                    ("spec.dump", spec), ("config.dump", meta.encode()),
                    ("checkpoint/inventory.img", b"simulated"),
                ):  # fmt: skip
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(data), int(time.time())
                    tar.addfile(info, io.BytesIO(data))
        except OSError as err:
            raise SimError("UNKNOWN", f"failed to write checkpoint archive: {err}") from err

    def remove_container(self, cid: str) -> None:
        c = self.containers.get(cid)
        if c is None:
            return
        if c.state == RUNNING:
            self._exit(c, 137, "Error", "")
        c.cancel_timers()
        del self.containers[cid]
        sb = self.sandboxes.get(c.sandbox_id)
        if sb is not None:
            sb.containers.discard(cid)
        uid = c.pod_uid()
        if uid in self.by_pod_uid:
            self.by_pod_uid[uid].discard(cid)
            if not self.by_pod_uid[uid]:
                del self.by_pod_uid[uid]
        self._changed()
        self._emit(c, pb.CONTAINER_DELETED_EVENT)

    # -- images
    def _image_by_id(self, ref: str) -> pb.Image | None:
        for img in self.images.values():
            if img.id == ref or ref in img.repo_digests:
                return img
        return None

    def image_missing(self, ref: str) -> bool:
        tag = normalize_image(ref).rsplit(":", 1)[-1]
        return tag in self.opts.missing_tags

    def add_image(self, ref: str) -> pb.Image:
        norm = normalize_image(ref)
        digest = "sha256:" + __import__("hashlib").sha256(norm.encode()).hexdigest()
        repo = norm.rsplit(":", 1)[0]
        img = pb.Image(
            id=digest,
            repo_tags=[norm],
            repo_digests=[f"{repo}@{digest}"],
            size=5 * 1024 * 1024 + len(norm) * 4096,
            spec=pb.ImageSpec(image=norm),
        )
        self.images[norm] = img
        return img


def _check_device(path: str) -> None:
    """As runc does for a container's devices: the host path (followed, as
    runc stats it) must be a device node."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise SimError(
            "UNKNOWN",
            f"failed to generate container spec: error gathering device information while "
            f'adding custom device "{path}": {err.strerror}',
        ) from err
    if not (stat.S_ISBLK(mode) or stat.S_ISCHR(mode)):
        raise SimError(
            "UNKNOWN",
            f"failed to generate container spec: error gathering device information while "
            f'adding custom device "{path}": not a device node',
        )
