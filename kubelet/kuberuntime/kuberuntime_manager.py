"""The runtime manager: from a pod spec and its runtime status to CRI calls
(kuberuntime_manager.go, kuberuntime_container.go, kuberuntime_sandbox.go).

compute_pod_actions() decides; sync_pod() carries the decision out. Waiting
reasons (ContainerCreating, CrashLoopBackOff, ErrImagePull, ...) are kept per
pod for the status manager.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubelet.container.expansion import expand_command_and_args
from kubelet.container.runtime import (
    CREATED,
    EXITED,
    RUNNING,
    UNKNOWN,
    ContainerConfigError,
    ContainerStatus,
    PodStatus,
    RunContainerOptions,
    RuntimeHelper,
    SandboxStatus,
)
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.events import Recorder
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.termination import (
    container_status_message,
    cri_log_tail_reader,
    read_termination_message,
    termination_message_host_path,
)
from kubelet.network.dns import kernel_hostname
from kubelet.sysctl import sandbox_sysctls
from kubelet.types import (
    Pod,
    container_field_path,
    grace_period,
    host_network,
    name,
    namespace,
    object_ref,
    qos_class,
    restart_policy,
    uid,
)
from kubelet.util.duration import format_duration
from kubelet.util.quantity import cpu_millis, to_bytes

log = logging.getLogger(__name__)

MIN_GRACE_SECONDS = 2  # minimumGracePeriodInSeconds
_PROPAGATION = {
    "": pb.PROPAGATION_PRIVATE,
    "None": pb.PROPAGATION_PRIVATE,
    "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL,
}
_STATE = {
    pb.CONTAINER_CREATED: CREATED,
    pb.CONTAINER_RUNNING: RUNNING,
    pb.CONTAINER_EXITED: EXITED,
    pb.CONTAINER_UNKNOWN: UNKNOWN,
}


def format_pod(pod: Pod) -> str:
    return f"{name(pod)}_{namespace(pod)}({uid(pod)})"


@dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    next_init_container: dict[str, Any] | None = None
    containers_to_start: list[int] = field(default_factory=list)
    # container ID -> (status, reason for the kill)
    containers_to_kill: dict[str, tuple[ContainerStatus, str]] = field(default_factory=dict)


@dataclass
class SyncResult:
    errors: list[str] = field(default_factory=list)
    sandbox_created: bool = False
    # Seconds until a back-off that blocked this sync runs out (None: no back-off).
    retry_after: float | None = None

    def backoff_until(self, seconds: float) -> None:
        self.retry_after = seconds if self.retry_after is None else min(self.retry_after, seconds)

    @property
    def ok(self) -> bool:
        return not self.errors


class RuntimeManager:
    def __init__(
        self,
        runtime: RuntimeService,
        images: ImageService,
        helper: RuntimeHelper,
        pod_logs_dir: str,
        runtime_name: str = "cri",
        node_memory: int = 0,
        cgroups_per_qos: bool = False,
        cgroup_root: str = "",
        crash_backoff: Backoff | None = None,
        image_backoff: Backoff | None = None,
        recorder: Recorder | None = None,
        must_restart: Callable[[str], str | None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.images = images
        self.helper = helper
        self.pod_logs_dir = pod_logs_dir
        self.runtime_name = runtime_name
        self.node_memory = node_memory
        self.cgroups_per_qos = cgroups_per_qos
        self.cgroup_root = cgroup_root
        self.crash_backoff = crash_backoff or Backoff(10, 300)
        self.image_backoff = image_backoff or Backoff(10, 300)
        self.recorder = recorder
        # Container ID -> why it must be restarted (a failed liveness or startup
        # probe): the prober's answer.
        self.must_restart: Callable[[str], str | None] = must_restart or (lambda _cid: None)
        # pod UID -> container name -> (reason, message) while it is not running
        self.waiting: dict[str, dict[str, tuple[str, str]]] = {}
        self._pull_locks: dict[str, asyncio.Lock] = {}

    # ---------------------------------------------------------------- status
    async def get_pod_status(self, pod_uid: str, pod_name: str = "", ns: str = "") -> PodStatus:
        sel = {L.POD_UID: pod_uid}
        sandboxes = await self.runtime.list_pod_sandbox(pb.PodSandboxFilter(label_selector=sel))
        containers = await self.runtime.list_containers(pb.ContainerFilter(label_selector=sel))
        sb_st, c_st = await asyncio.gather(
            asyncio.gather(*(self._sandbox_status(s) for s in sandboxes), return_exceptions=True),
            asyncio.gather(
                *(self._container_status(c) for c in containers), return_exceptions=True
            ),
        )
        sbs = [s for s in sb_st if isinstance(s, SandboxStatus)]
        cs = [c for c in c_st if isinstance(c, ContainerStatus)]
        for r in (*sb_st, *c_st):
            # A container removed between List and Status is simply gone.
            if isinstance(r, BaseException) and not isinstance(r, errors.NotFoundError):
                raise r
        sbs.sort(key=lambda s: s.created_at, reverse=True)
        cs.sort(key=lambda c: c.created_at, reverse=True)
        ips = []
        for s in sbs:
            if s.ready and s.ip:
                ips = [s.ip]
                break
        if sandboxes and not pod_name:
            md = sandboxes[0].metadata
            pod_name, ns = md.name, md.namespace
        return PodStatus(pod_uid, pod_name, ns, ips, sbs, cs, time.time())

    async def status_from_event(self, ev: pb.ContainerEventResponse) -> PodStatus:
        """A PodStatus from a container event, which carries the sandbox and all its
        containers (GeneratePodStatus upstream)."""
        sb = ev.pod_sandbox_status
        hostnet = sb.linux.namespaces.options.network == pb.NODE
        sandbox = SandboxStatus(
            sb.id,
            sb.state == pb.SANDBOX_READY,
            sb.created_at,
            sb.metadata.attempt,
            sb.network.ip,
            hostnet,
        )
        cs = [await self.convert_container_status(c) for c in ev.containers_statuses]
        cs.sort(key=lambda c: c.created_at, reverse=True)
        ips = [sb.network.ip] if sandbox.ready and sb.network.ip else []
        return PodStatus(
            sb.metadata.uid,
            sb.metadata.name,
            sb.metadata.namespace,
            ips,
            [sandbox],
            cs,
            time.time(),
        )

    async def _sandbox_status(self, s: pb.PodSandbox) -> SandboxStatus:
        st = (await self.runtime.pod_sandbox_status(s.id)).status
        hostnet = st.linux.namespaces.options.network == pb.NODE
        return SandboxStatus(
            s.id,
            st.state == pb.SANDBOX_READY,
            st.created_at,
            st.metadata.attempt,
            st.network.ip,
            hostnet,
        )

    async def _container_status(self, c: pb.Container) -> ContainerStatus:
        st = (await self.runtime.container_status(c.id)).status
        return await self.convert_container_status(
            st, c.annotations, c.labels.get(L.CONTAINER_NAME, "")
        )

    async def convert_container_status(
        self, st: pb.ContainerStatus, annotations: Any = None, cname: str = ""
    ) -> ContainerStatus:
        ann = st.annotations or annotations or {}
        c_name = st.metadata.name or cname
        message = st.message
        if st.state == pb.CONTAINER_EXITED:
            # The termination message: the file mounted at terminationMessagePath,
            # or with FallbackToLogsOnError the tail of a failed container's log.
            host = termination_message_host_path(
                ({"containerPath": m.container_path, "hostPath": m.host_path} for m in st.mounts),
                ann.get(L.CONTAINER_TERMINATION_MESSAGE_PATH, ""),
            )
            text = await read_termination_message(
                host,
                ann.get(L.CONTAINER_TERMINATION_MESSAGE_POLICY, "File"),
                st.exit_code,
                st.reason,
                cri_log_tail_reader(st.log_path),
            )
            message = container_status_message(st.message, text)
        return ContainerStatus(
            id=st.id,
            name=c_name,
            state=_STATE.get(st.state, UNKNOWN),
            created_at=st.created_at,
            started_at=st.started_at,
            finished_at=st.finished_at,
            exit_code=st.exit_code,
            image=st.image.user_specified_image or st.image.image,
            image_ref=st.image_ref,
            image_id=st.image_id or st.image_ref,
            hash=ann.get(L.CONTAINER_HASH, ""),
            restart_count=int(ann.get(L.CONTAINER_RESTART_COUNT, "0") or 0),
            reason=st.reason,
            message=message,
            runtime=self.runtime_name,
        )

    # --------------------------------------------------------------- decide
    def compute_pod_actions(self, pod: Pod, status: PodStatus) -> PodActions:
        spec = pod["spec"]
        init = spec.get("initContainers") or []
        containers = spec["containers"]
        policy = restart_policy(pod)
        a = PodActions()
        create, attempt, sid = self._sandbox_changed(pod, status)
        a.create_sandbox, a.attempt, a.sandbox_id = create, attempt, sid
        if create:
            if policy == "Never" and attempt != 0 and status.containers:
                # The pod ran already and must not run again: finish it.
                a.kill_pod, a.create_sandbox = True, False
                return a
            a.kill_pod = True  # whatever is left of the old sandbox goes first
            if init:
                a.next_init_container = init[0]
                return a
            for i, c in enumerate(containers):
                prev = status.find(c["name"])
                if prev is not None and prev.state == EXITED and not _should_restart(policy, prev):
                    continue
                a.containers_to_start.append(i)
            if not a.containers_to_start:
                a.create_sandbox = False
            return a

        # Sandbox is fine: init containers first, in order, one at a time.
        for c in init:
            prev = status.find(c["name"])
            if prev is None or prev.state in (CREATED, UNKNOWN):
                a.next_init_container = c
                return a
            if prev.state == RUNNING:
                return a  # wait for it to finish
            if prev.exit_code == 0:
                continue
            if policy == "Never":
                a.kill_pod = True  # an init container failed for good: the pod failed
                return a
            a.next_init_container = c
            return a

        keep = 0
        wanted = {c["name"] for c in (*init, *containers)}
        for i, c in enumerate(containers):
            prev = status.find(c["name"])
            if prev is None or prev.state != RUNNING:
                if _should_restart(policy, prev):
                    a.containers_to_start.append(i)
                continue
            why = self.must_restart(prev.id)
            if why:
                msg = f"Container {c['name']} {why}, will be restarted"
                a.containers_to_kill[prev.id] = (prev, msg)
                if policy != "Never":
                    a.containers_to_start.append(i)
                continue
            want_hash = L.container_hash(c)
            if prev.hash and prev.hash != want_hash:
                msg = f"Container {c['name']} definition changed"
                a.containers_to_kill[prev.id] = (prev, msg)
                if policy != "Never":
                    a.containers_to_start.append(i)
                continue
            keep += 1
        for cs in status.containers:
            if cs.state == RUNNING and cs.name not in wanted:
                a.containers_to_kill[cs.id] = (cs, "Container is not in the pod spec")
        if keep == 0 and not a.containers_to_start:
            a.kill_pod = True
        return a

    def _sandbox_changed(self, pod: Pod, status: PodStatus) -> tuple[bool, int, str]:
        if not status.sandboxes:
            return True, 0, ""
        ready = [s for s in status.sandboxes if s.ready]
        latest = status.sandboxes[0]
        if len(ready) > 1 or not latest.ready:
            return True, latest.attempt + 1, latest.id
        if latest.host_network != host_network(pod):
            return True, latest.attempt + 1, latest.id
        if not host_network(pod) and not latest.ip:
            return True, latest.attempt + 1, latest.id
        return False, latest.attempt, latest.id

    # ------------------------------------------------------------------ act
    async def sync_pod(self, pod: Pod, status: PodStatus) -> SyncResult:
        # Everything this sync learns (errors, back-off deadlines) goes into its
        # own result: up to 256 pods sync concurrently through this object.
        res = SyncResult()
        a = self.compute_pod_actions(pod, status)
        waiting = self.waiting.setdefault(uid(pod), {})
        if a.kill_pod:
            await self.kill_pod(pod, status, None, remove=False)
            if not a.create_sandbox:
                return res
        else:
            await asyncio.gather(
                *(
                    self.kill_container(pod, cs, None, msg)
                    for cs, msg in a.containers_to_kill.values()
                )
            )
        try:
            sandbox_cfg = self.sandbox_config(pod, a.attempt)
        except ValueError as err:  # resolv.conf unreadable, an invalid hostname
            msg = f"Failed to create pod sandbox: GeneratePodSandboxConfig for pod {format_pod(pod)} failed: {err}"
            self._event(pod, "Warning", "FailedCreatePodSandBox", msg)
            res.errors.append(msg)
            return res
        sid = a.sandbox_id
        if a.create_sandbox:
            os.makedirs(sandbox_cfg.log_directory, exist_ok=True)
            try:
                sid = await self.runtime.run_pod_sandbox(sandbox_cfg)
            except errors.CRIError as err:
                msg = f"Failed to create pod sandbox: {err.message}"
                self._event(pod, "Warning", "FailedCreatePodSandBox", msg)
                res.errors.append(msg)
                return res
            res.sandbox_created = True
        if a.next_init_container is not None:
            problem = await self.start_container(
                pod, sid, sandbox_cfg, a.next_init_container, status, res
            )
            if problem:
                res.errors.append(problem)
            return res
        results = await asyncio.gather(
            *(
                self.start_container(
                    pod, sid, sandbox_cfg, pod["spec"]["containers"][i], status, res
                )
                for i in a.containers_to_start
            )
        )
        res.errors.extend(e for e in results if e)
        # Containers that run need no waiting reason; the rest keep theirs.
        for c in pod["spec"]["containers"]:
            prev = status.find(c["name"])
            if (
                prev is not None
                and prev.state == RUNNING
                and c["name"]
                not in [pod["spec"]["containers"][i]["name"] for i in a.containers_to_start]
            ):
                waiting.pop(c["name"], None)
        return res

    async def start_container(
        self,
        pod: Pod,
        sid: str,
        sandbox_cfg: pb.PodSandboxConfig,
        c: dict[str, Any],
        status: PodStatus,
        res: SyncResult,
    ) -> str | None:
        """Start one container; returns an error message (also kept as its waiting
        reason). A back-off that blocks it is recorded in `res`."""
        waiting = self.waiting.setdefault(uid(pod), {})
        cname = c["name"]
        chash = L.container_hash(c)
        prev = status.find(cname)
        key = f"{name(pod)}_{namespace(pod)}_{uid(pod)}_{cname}_{chash}"
        if prev is not None and prev.state == EXITED and prev.finished_at:
            finished = prev.finished_at / 1e9
            if self.crash_backoff.in_backoff_since(key, finished):
                # Counted from when the container finished, as upstream.
                res.backoff_until(
                    max(0.05, finished + self.crash_backoff.get(key) - self.crash_backoff.now())
                )
                msg = (
                    f"back-off {format_duration(self.crash_backoff.get(key))} restarting failed "
                    f"container={cname} pod={format_pod(pod)}"
                )
                if waiting.get(cname, ("",))[0] != "CrashLoopBackOff":
                    msg0 = "Back-off restarting failed container " + cname
                    self._event(pod, "Warning", "BackOff", msg0, cname)
                waiting[cname] = ("CrashLoopBackOff", msg)
                return msg
            self.crash_backoff.next(key, finished)
        image_ref, err = await self.ensure_image(pod, c, sandbox_cfg, res)
        if err:
            return err
        restart = prev.restart_count + 1 if prev is not None else 0
        try:
            opts = await self.helper.generate_run_container_options(pod, c, status.ips)
        except ContainerConfigError as e:
            msg = str(e)
            waiting[cname] = (ContainerConfigError.reason, msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        cfg = self.container_config(pod, c, restart, image_ref or c["image"], chash, opts)
        try:
            cid = await self.runtime.create_container(sid, cfg, sandbox_cfg)
        except errors.CRIError as e:
            msg = e.message
            waiting[cname] = ("CreateContainerError", msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        self._event(pod, "Normal", "Created", f"Created container: {cname}", cname)
        try:
            await self.runtime.start_container(cid)
        except errors.CRIError as e:
            msg = e.message
            waiting[cname] = ("RunContainerError", msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        self._event(pod, "Normal", "Started", f"Started container {cname}", cname)
        waiting.pop(cname, None)
        await self._prune_dead(status, cname)
        return None

    async def _prune_dead(self, status: PodStatus, cname: str) -> None:
        # Keep the last exited instance (for lastState and restartCount), drop older ones.
        dead = [c for c in status.all_named(cname) if c.state == EXITED]
        for c in dead[1:]:
            try:
                await self.runtime.remove_container(c.id)
            except errors.CRIError as err:
                log.debug("removing dead container %s: %s", c.id, err)

    async def ensure_image(
        self, pod: Pod, c: dict[str, Any], sandbox_cfg: pb.PodSandboxConfig, res: SyncResult
    ) -> tuple[str, str | None]:
        """EnsureImageExists with pull policies and ImagePullBackOff. Returns (ref, error)."""
        image = c["image"]
        cname = c["name"]
        waiting = self.waiting.setdefault(uid(pod), {})
        policy = c.get("imagePullPolicy", "IfNotPresent")
        spec = pb.ImageSpec(image=image)
        try:
            present = await self.images.image_status(spec)
        except errors.CRIError as err:
            msg = f"Failed to inspect image {image!r}: {err.message}"
            waiting[cname] = ("ImageInspectError", msg)
            return "", msg
        if policy == "Never":
            if present is None:
                msg = f'Container image "{image}" is not present with pull policy of Never'
                waiting[cname] = ("ErrImageNeverPull", msg)
                self._event(pod, "Warning", "ErrImageNeverPull", msg, cname)
                return "", msg
            return str(present.id), None
        if policy == "IfNotPresent" and present is not None:
            return str(present.id), None
        key = f"{uid(pod)}_{image}"
        # "Is the time since the last failed pull shorter than the back-off?"
        # (IsInBackOffSinceUpdate upstream): 10 s, 20 s, 40 s ... after each failure.
        if self.image_backoff.in_backoff_since_update(key):
            res.backoff_until(self.image_backoff.remaining(key))
            msg = f'Back-off pulling image "{image}"'
            waiting[cname] = ("ImagePullBackOff", msg)
            self._event(pod, "Normal", "BackOff", msg, cname)
            return "", msg
        self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"', cname)
        lock = self._pull_locks.setdefault(image, asyncio.Lock())
        t = time.monotonic()
        try:
            async with lock:  # one pull per image at a time (serializeImagePulls per image)
                ref = await self.images.pull_image(spec, None, sandbox_cfg)
        except errors.CRIError as err:
            self.image_backoff.next(key, self.image_backoff.now())
            msg = f'Failed to pull image "{image}": {err.message}'
            waiting[cname] = ("ErrImagePull", msg)
            self._event(pod, "Warning", "Failed", msg, cname)
            return "", msg
        self._event(
            pod,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {time.monotonic() - t:.3f}s',
            cname,
        )
        return ref, None

    # ---------------------------------------------------------------- kill
    async def kill_container(
        self, pod: Pod | None, cs: ContainerStatus, grace: int | None, message: str = ""
    ) -> None:
        if grace is None:
            grace = grace_period(pod) if pod is not None else 30
            if pod is not None and pod["metadata"].get("deletionGracePeriodSeconds") is not None:
                grace = int(pod["metadata"]["deletionGracePeriodSeconds"])
        grace = max(grace, MIN_GRACE_SECONDS)
        if pod is not None:
            self._event(
                pod,
                "Normal",
                "Killing",
                f"Stopping container {cs.name}" + (f": {message}" if message else ""),
                cs.name,
            )
        try:
            await self.runtime.stop_container(cs.id, grace)
        except errors.NotFoundError:
            pass

    async def kill_pod(
        self, pod: Pod | None, status: PodStatus, grace: int | None, remove: bool
    ) -> None:
        """Stop every container (in parallel, with the grace period), then the sandboxes.
        With remove=True also remove them: the pod is gone for good."""
        running = [c for c in status.containers if c.state in (RUNNING, CREATED, UNKNOWN)]
        await asyncio.gather(*(self.kill_container(pod, c, grace) for c in running))
        for s in status.sandboxes:
            try:
                await self.runtime.stop_pod_sandbox(s.id)
            except errors.NotFoundError:
                pass
        if remove:
            for c in status.containers:
                try:
                    await self.runtime.remove_container(c.id)
                except errors.NotFoundError:
                    pass
            for s in status.sandboxes:
                try:
                    await self.runtime.remove_pod_sandbox(s.id)
                except errors.NotFoundError:
                    pass
            self.waiting.pop(status.id, None)

    # -------------------------------------------------------------- configs
    def sandbox_config(self, pod: Pod, attempt: int) -> pb.PodSandboxConfig:
        spec = pod["spec"]
        hostnet = host_network(pod)
        # Host-network sandboxes get an empty hostname: the runtime then uses the
        # node's, which is what they share anyway. ValueError: a bad hostname.
        hostname = ""
        if not hostnet:
            host, domain = self.helper.generate_pod_hostname_and_domain(pod)
            hostname = kernel_hostname(host, domain, bool(spec.get("setHostnameAsFQDN")))
        ports = []
        for c in spec["containers"]:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    ports.append(
                        pb.PortMapping(
                            protocol=pb.Protocol.Value(p.get("protocol", "TCP")),
                            container_port=int(p["containerPort"]),
                            host_port=int(p["hostPort"]),
                            host_ip=p.get("hostIP", ""),
                        )
                    )
        ns_opts = pb.NamespaceOption(
            network=pb.NODE if hostnet else pb.POD,
            pid=pb.NODE if spec.get("hostPID") else pb.CONTAINER,
            ipc=pb.NODE if spec.get("hostIPC") else pb.POD,
        )
        linux = pb.LinuxPodSandboxConfig(
            cgroup_parent=self.pod_cgroup_parent(pod),
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns_opts),
            sysctls=sandbox_sysctls(pod),  # admitted against the allowlist at the door
        )
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(
                name=name(pod), uid=uid(pod), namespace=namespace(pod), attempt=attempt
            ),
            hostname=hostname,
            log_directory=os.path.join(
                self.pod_logs_dir, f"{namespace(pod)}_{name(pod)}_{uid(pod)}"
            ),
            dns_config=self._dns(pod),
            port_mappings=ports,
            labels=L.sandbox_labels(pod),
            annotations=L.sandbox_annotations(pod),
            linux=linux,
        )

    def pod_cgroup_parent(self, pod: Pod) -> str:
        if not self.cgroups_per_qos:
            return ""
        qos = qos_class(pod)
        root = self.cgroup_root.rstrip("/") + "/kubepods"
        if qos == "Guaranteed":
            return f"{root}/pod{uid(pod)}"
        return f"{root}/{qos.lower()}/pod{uid(pod)}"

    def _dns(self, pod: Pod) -> pb.DNSConfig:
        d = self.helper.get_pod_dns(pod)
        return pb.DNSConfig(servers=d.servers, searches=d.searches, options=d.options)

    def container_config(
        self,
        pod: Pod,
        c: dict[str, Any],
        restart: int,
        image_ref: str,
        chash: str,
        opts: RunContainerOptions,
    ) -> pb.ContainerConfig:
        envs = [pb.KeyValue(key=k, value=v) for k, v in opts.envs]
        command, args = expand_command_and_args(c, opts.envs)
        mounts = [
            pb.Mount(
                container_path=m.container_path,
                host_path=m.host_path,
                readonly=m.read_only,
                selinux_relabel=m.selinux_relabel,
                propagation=_PROPAGATION[m.propagation],
            )
            for m in opts.mounts
        ]
        sc = c.get("securityContext") or {}
        lsc = pb.LinuxContainerSecurityContext(
            privileged=bool(sc.get("privileged")),
            readonly_rootfs=bool(sc.get("readOnlyRootFilesystem")),
            no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        )
        if sc.get("runAsUser") is not None:
            lsc.run_as_user.value = int(sc["runAsUser"])
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=c["name"], attempt=restart),
            image=pb.ImageSpec(image=image_ref, user_specified_image=c["image"]),
            command=command,
            args=args,
            working_dir=c.get("workingDir", ""),
            envs=envs,
            mounts=mounts,
            labels=L.container_labels(pod, c),
            annotations=L.container_annotations(pod, c, restart, chash),
            log_path=f"{c['name']}/{restart}.log",
            stdin=bool(c.get("stdin")),
            stdin_once=bool(c.get("stdinOnce")),
            tty=bool(c.get("tty")),
            linux=pb.LinuxContainerConfig(resources=self.resources(pod, c), security_context=lsc),
        )

    def resources(self, pod: Pod, c: dict[str, Any]) -> pb.LinuxContainerResources:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        out = pb.LinuxContainerResources()
        cpu_req = req.get("cpu", lim.get("cpu"))
        # cpu shares from the request (min 2), CFS quota from the limit, as upstream.
        out.cpu_shares = max(2, cpu_millis(cpu_req) * 1024 // 1000) if cpu_req else 2
        if "cpu" in lim:
            out.cpu_period = 100000
            out.cpu_quota = max(1000, cpu_millis(lim["cpu"]) * 100000 // 1000)
        if "memory" in lim:
            out.memory_limit_in_bytes = to_bytes(lim["memory"])
        qos = qos_class(pod)
        if qos == "Guaranteed":
            out.oom_score_adj = -997
        elif qos == "BestEffort":
            out.oom_score_adj = 1000
        else:
            mem_req = to_bytes(req["memory"]) if "memory" in req else 0
            adj = 1000 - (1000 * mem_req) // self.node_memory if self.node_memory else 999
            out.oom_score_adj = int(min(max(adj, 2), 999))
        return out

    def _event(
        self, pod: Pod, etype: str, reason: str, msg: str, container: str | None = None
    ) -> None:
        # Container events point at the container, as upstream's container refs do.
        if self.recorder is not None:
            path = container_field_path(pod, container) if container else None
            self.recorder.event(object_ref(pod, path), etype, reason, msg)


def _should_restart(policy: str, prev: ContainerStatus | None) -> bool:
    if prev is None or prev.state in (CREATED, UNKNOWN):
        return True
    if prev.state == RUNNING:
        return False
    if policy == "Never":
        return False
    if policy == "OnFailure" and prev.exit_code == 0:
        return False
    return True
