"""Containers of a pod: their status, start and kill (kuberuntime_container.go)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Mapping

from kubelet import metrics
from kubelet.cm.devicemanager.pod_devices import AllocationError
from kubelet.cm.dra.manager import DRAError
from kubelet.cm.interfaces import ContainerResourceManager
from kubelet.container.runtime import (
    CREATED,
    EXITED,
    RUNNING,
    UNKNOWN,
    ContainerConfigError,
    ContainerResources,
    ContainerStatus,
    ContainerUser,
    LinuxUser,
    PodStatus,
    RuntimeHelper,
)
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.helpers import (
    MIN_GRACE_SECONDS,
    PodReporter,
    RuntimeIdentity,
    SyncResult,
    UnnamedRuntime,
    container_state,
    each_ignoring_gone,
    find_container_spec,
    format_pod,
    has_restartable_init,
    pod_grace_period,
)
from kubelet.kuberuntime.kuberuntime_container_linux import (
    NodeSettings,
    container_config,
    sandbox_userns,
)
from kubelet.kuberuntime.kuberuntime_image import ImageManager
from kubelet.kuberuntime.kuberuntime_termination_order import TerminationOrdering
from kubelet.kuberuntime.security_context import (
    SecurityContextError,
    image_user,
    namespace_options,
    verify_run_as_non_root,
)
from kubelet.kuberuntime.termination import (
    container_status_message,
    cri_log_tail_reader,
    pod_container_dir,
    read_termination_message,
    termination_message_host_path,
)
from kubelet.lifecycle.handlers import HandlerRunner
from kubelet.types import Container, LifecycleHandler, Pod, Secret, name, namespace, uid
from kubelet.util.duration import format_duration

log = logging.getLogger(__name__)


class _StartError(Exception):
    """A container could not be created or started: its waiting reason and why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def container_user(st: pb.ContainerStatus) -> ContainerUser | None:
    """toKubeContainerUser: the user the runtime says the process runs as."""
    if not st.HasField("user"):
        return None
    if not st.user.HasField("linux"):
        return ContainerUser(None)
    u = st.user.linux
    return ContainerUser(LinuxUser(u.uid, u.gid, tuple(u.supplemental_groups)))


class ContainerManager:
    def __init__(
        self,
        runtime: RuntimeService,
        images: ImageService,
        helper: RuntimeHelper,
        reporter: PodReporter,
        image_manager: ImageManager,
        hooks: HandlerRunner,
        crash_backoff: Backoff,
        node: NodeSettings,
        identity: RuntimeIdentity = UnnamedRuntime(),
        resources: ContainerResourceManager | None = None,
    ) -> None:
        self.runtime = runtime
        self.images = images
        self.helper = helper
        self.reporter = reporter
        self.image_manager = image_manager
        # postStart and preStop hooks.
        self.hooks = hooks
        self.crash_backoff = crash_backoff
        self.node = node
        # The runtime's name in container IDs (<name>://<id>), once it answers.
        self.identity = identity
        # CPU and memory pinning (the container manager's InternalContainerLifecycle).
        self.resources = resources

    # -------------------------------------------------------------- status
    async def container_status(self, c: pb.Container) -> ContainerStatus:
        st = (await self.runtime.container_status(c.id)).status
        return await self.convert_container_status(
            st, c.annotations, c.labels.get(L.CONTAINER_NAME, "")
        )

    async def convert_container_status(
        self, st: pb.ContainerStatus, annotations: Mapping[str, str] | None = None, cname: str = ""
    ) -> ContainerStatus:
        ann = st.annotations or annotations or {}
        c_name = st.metadata.name or cname
        message = st.message
        if st.state == pb.CONTAINER_EXITED:
            message = container_status_message(
                st.message, await self._termination_message(st, ann, c_name)
            )
        return ContainerStatus(
            id=st.id,
            name=c_name,
            state=container_state(st.state),
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
            runtime=self.identity.runtime_name(),
            resources=(
                ContainerResources.from_cri(st.resources.linux)
                if st.HasField("resources") and st.resources.HasField("linux")
                else None
            ),
            user=container_user(st) if self.node.supplemental_groups_policy else None,
        )

    async def _termination_message(
        self, st: pb.ContainerStatus, ann: Mapping[str, str], cname: str
    ) -> str:
        """The file mounted at terminationMessagePath, or with FallbackToLogsOnError
        the tail of a failed container's log."""
        host = termination_message_host_path(
            ({"containerPath": m.container_path, "hostPath": m.host_path} for m in st.mounts),
            ann.get(L.CONTAINER_TERMINATION_MESSAGE_PATH, ""),
        )
        return await read_termination_message(
            host,
            ann.get(L.CONTAINER_TERMINATION_MESSAGE_POLICY, "File"),
            st.exit_code,
            st.reason,
            cri_log_tail_reader(st.log_path),
            self._termination_dir(st.labels.get(L.POD_UID, ""), cname),
        )

    def _termination_dir(self, pod_uid: str, container_name: str) -> str:
        """Where this container's termination-log files are ("" when its labels
        name no usable pod uid or container: then none is read)."""
        try:
            return pod_container_dir(self.helper.get_pod_dir(pod_uid), container_name)
        except ValueError:
            return ""

    # --------------------------------------------------------------- start
    async def start_container(
        self,
        pod: Pod,
        sid: str,
        sandbox_cfg: pb.PodSandboxConfig,
        c: Container,
        status: PodStatus,
        res: SyncResult,
        pod_ips: list[str],
        pull_secrets: list[Secret] | None = None,
    ) -> str | None:
        """Start one container (startContainer); returns an error message (also
        kept as its waiting reason). A back-off that blocks it is recorded in
        `res`. pod_ips: the sandbox's, asked again when this sync created it."""
        cname, chash = c["name"], L.container_hash(c)
        waiting = self.reporter.waiting_of(pod)
        prev = status.find(cname)
        blocked = self._crash_backoff(pod, cname, chash, prev, res)
        if blocked is not None:
            return blocked
        image_ref, image, err = await self.image_manager.ensure_image(
            pod, c, sandbox_cfg, res, pull_secrets or []
        )
        if err:
            return err
        restart = _restart_count(prev, sandbox_cfg, cname)
        try:
            cfg = await self._generate_config(
                pod, c, status, restart, chash, image_ref, image, pod_ips,
                sandbox_userns(sandbox_cfg),
            )  # fmt: skip
            cid = await self._create_and_start(pod, c, sid, cfg, sandbox_cfg)
        except _StartError as e:
            return self.reporter.container_failed(pod, cname, e.reason, e.message)
        hook_err = await self._post_start(pod, c, cid)
        if hook_err is not None:
            return hook_err
        waiting.pop(cname, None)
        return None

    def _crash_backoff(
        self, pod: Pod, cname: str, chash: str, prev: ContainerStatus | None, res: SyncResult
    ) -> str | None:
        """CrashLoopBackOff: the message when the container may not start yet,
        counted from when it finished, as upstream."""
        if prev is None or prev.state != EXITED or not prev.finished_at:
            return None
        b = self.crash_backoff
        key = f"{name(pod)}_{namespace(pod)}_{uid(pod)}_{cname}_{chash}"
        finished = prev.finished_at / 1e9
        if not b.in_backoff_since(key, finished):
            b.next(key, finished)
            return None
        res.backoff_until(max(0.05, finished + b.get(key) - b.now()))
        msg = (
            f"back-off {format_duration(b.get(key))} restarting failed "
            f"container={cname} pod={format_pod(pod)}"
        )
        waiting = self.reporter.waiting_of(pod)
        if waiting.get(cname, ("",))[0] != "CrashLoopBackOff":
            msg0 = "Back-off restarting failed container " + cname
            self.reporter.event(pod, "Warning", "BackOff", msg0, cname)
        waiting[cname] = ("CrashLoopBackOff", msg)
        return msg

    async def _generate_config(
        self,
        pod: Pod,
        c: Container,
        status: PodStatus,
        restart: int,
        chash: str,
        image_ref: str,
        image: pb.Image | None,
        pod_ips: list[str],
        userns: pb.UserNamespace | None = None,
    ) -> pb.ContainerConfig:
        """The container's CRI config; _StartError when it cannot be made."""
        try:
            if image is None:  # just pulled: the user the image runs as (getImageUser)
                image = await self.images.image_status(pb.ImageSpec(image=image_ref))
            image_uid, image_username = image_user(image)
            problem = verify_run_as_non_root(pod, c, image_uid, image_username)
            if problem:
                raise ContainerConfigError(problem)
            opts = await self.helper.generate_run_container_options(pod, c, pod_ips)
            cfg = container_config(
                self.node, pod, c, restart, image_ref or c["image"], chash, opts,
                image_uid, image_username, userns,
            )  # fmt: skip
            if self.resources is not None:  # PreCreateContainer
                pin = self.resources.container_cpuset(pod, c)
                lr = cfg.linux.resources
                lr.cpuset_cpus, lr.cpuset_mems = pin.cpuset_cpus, pin.cpuset_mems
                if pin.unlimited_quota and lr.cpu_quota:
                    lr.cpu_quota = -1
                (await self.resources.device_options(pod, c)).apply(cfg)
        except (
            ContainerConfigError,
            SecurityContextError,
            AllocationError,
            DRAError,
            errors.CRIError,
        ) as e:
            msg = e.message if isinstance(e, errors.CRIError) else str(e)
            raise _StartError(ContainerConfigError.reason, msg) from e
        target_name = _target_container(c)
        if target_name:
            # An ephemeral container sharing the process namespace of its target.
            target = status.find(target_name)
            if target is None or target.state != RUNNING:
                msg = f"target container {target_name} is not running"
                raise _StartError("CreateContainerError", msg)
            cfg.linux.security_context.namespace_options.CopyFrom(
                namespace_options(
                    pod,
                    user_namespaces_support=self.node.user_namespaces_support,
                    pid_target=target.id,
                    userns=userns,
                )
            )
        return cfg

    async def _create_and_start(
        self,
        pod: Pod,
        c: Container,
        sid: str,
        cfg: pb.ContainerConfig,
        sandbox_cfg: pb.PodSandboxConfig,
    ) -> str:
        cname = c["name"]
        kind = metrics.container_type(pod["spec"], c)
        metrics.STARTED_CONTAINERS.labels(kind).inc()
        try:
            cid = await self.runtime.create_container(sid, cfg, sandbox_cfg)
        except errors.CRIError as e:
            metrics.STARTED_CONTAINERS_ERRORS.labels(kind, e.code_name).inc()
            raise _StartError("CreateContainerError", e.message) from e
        if self.resources is not None:  # PreStartContainer
            self.resources.container_created(pod, c, cid)
        self.reporter.event(pod, "Normal", "Created", f"Created container: {cname}", cname)
        try:
            await self.runtime.start_container(cid)
        except errors.CRIError as e:
            metrics.STARTED_CONTAINERS_ERRORS.labels(kind, e.code_name).inc()
            raise _StartError("RunContainerError", e.message) from e
        self.reporter.event(pod, "Normal", "Started", f"Started container {cname}", cname)
        if self.node.container_logs_dir:
            link = legacy.log_symlink(
                self.node.container_logs_dir, name(pod), namespace(pod), cname, cid
            )
            legacy.create(os.path.join(sandbox_cfg.log_directory, cfg.log_path), link)
        return cid

    async def _post_start(self, pod: Pod, c: Container, cid: str) -> str | None:
        """The postStart hook, part of the start as upstream: the sync (and so the
        status that would say Running) waits for it. A failure kills the container."""
        post_start = (c.get("lifecycle") or {}).get("postStart")
        if not post_start:
            return None
        cname = c["name"]
        hook_err = await self.hooks.run(cid, pod, c, post_start)
        if hook_err is None:
            return None
        log.info("postStart hook of %s/%s failed: %s", format_pod(pod), cname, hook_err)
        # The event leaves the message out: it may hold secrets.
        self.reporter.event(pod, "Warning", "FailedPostStartHook", "PostStartHook failed", cname)
        killed = ContainerStatus(cid, cname, RUNNING, runtime=self.identity.runtime_name())
        try:
            await self.kill_container(pod, killed, None, "FailedPostStartHook")
        except errors.CRIError as err:
            log.warning("killing %s after its postStart hook failed: %s", cid, err)
        self.reporter.waiting_of(pod)[cname] = ("PostStartHookError", hook_err)
        return hook_err

    # ---------------------------------------------------------------- kill
    async def kill_containers(self, pod: Pod | None, status: PodStatus, grace: int | None) -> None:
        """Stop every container that may run, in parallel, within the grace
        period; sidecars after the main containers, in reverse order."""
        running = [c for c in status.containers if c.state in (RUNNING, CREATED, UNKNOWN)]
        ordering = (
            TerminationOrdering(pod, {c.name for c in running})
            if pod is not None and has_restartable_init(pod)
            else None
        )
        await asyncio.gather(
            *(self.kill_container(pod, c, grace, ordering=ordering) for c in running)
        )

    async def kill_container(
        self,
        pod: Pod | None,
        cs: ContainerStatus,
        grace: int | None,
        message: str = "",
        ordering: TerminationOrdering | None = None,
    ) -> None:
        """Stop one container (killContainer): the preStop hook first, inside the
        grace period, then the stop signal with what is left of it (never under
        minimumGracePeriodInSeconds). grace: an override of the pod's."""
        try:
            await self._kill_container(pod, cs, grace, message, ordering)
        finally:
            if ordering is not None:
                ordering.terminated(cs.name)

    async def _kill_container(
        self,
        pod: Pod | None,
        cs: ContainerStatus,
        grace: int | None,
        message: str,
        ordering: TerminationOrdering | None,
    ) -> None:
        spec = find_container_spec(pod, cs.name) if pod is not None else None
        if grace is None:
            grace = pod_grace_period(pod) if pod is not None else 30
        if pod is not None:
            msg = message or f"Stopping container {cs.name}"
            self.reporter.event(pod, "Normal", "Killing", msg, cs.name)
        pre_stop = (spec.get("lifecycle") or {}).get("preStop") if spec is not None else None
        if pod is not None and spec is not None and pre_stop and grace > 0:
            grace -= await self._pre_stop(pod, spec, cs, pre_stop, grace)
        if ordering is not None and grace > 0:
            grace -= int(await ordering.wait_for_turn(cs.name, grace))
        try:
            await self.runtime.stop_container(cs.id, max(grace, MIN_GRACE_SECONDS))
        except errors.NotFoundError:
            pass

    async def _pre_stop(
        self, pod: Pod, spec: Container, cs: ContainerStatus, hook: LifecycleHandler, grace: int
    ) -> int:
        """Run the preStop hook for at most `grace` seconds; answers the whole
        seconds it took (a hook that hangs is given up at the end of the grace
        period: it cannot make the pod outlive it)."""
        start = time.monotonic()
        task = asyncio.ensure_future(self.hooks.run(cs.id, pod, spec, hook, timeout=grace))
        try:
            msg = await asyncio.wait_for(task, grace)
        except TimeoutError:
            log.info("preStop hook of %s/%s not done within %ds", format_pod(pod), cs.name, grace)
            msg = None
        except Exception as err:  # a hook must never keep a container from stopping
            msg = str(err)
        if msg is not None:
            log.info("preStop hook of %s/%s failed: %s", format_pod(pod), cs.name, msg)
            self.reporter.event(pod, "Warning", "FailedPreStopHook", "PreStopHook failed", cs.name)
        return int(time.monotonic() - start)

    async def remove_containers(self, status: PodStatus) -> None:
        await each_ignoring_gone(self.runtime.remove_container, [c.id for c in status.containers])
        if self.resources is not None:  # PostStopContainer
            for c in status.containers:
                self.resources.remove_container(c.id)


def _target_container(c: Container) -> str:
    """An ephemeral container's targetContainerName ("" for any other container)."""
    fields: Mapping[str, object] = c
    target = fields.get("targetContainerName")
    return target if isinstance(target, str) else ""


def _restart_count(
    prev: ContainerStatus | None, sandbox_cfg: pb.PodSandboxConfig, cname: str
) -> int:
    if prev is not None:
        return prev.restart_count + 1
    # No container of this name in the runtime: a runtime that lost its state
    # (restarted empty, node reboot) must not start the count and the log file
    # again at 0, so count on from the logs on disk.
    return restart_count_from_log_dir(os.path.join(sandbox_cfg.log_directory, cname))


_RESTART_LOG = re.compile(r"^(\d+)\.log(\..*)?$")


def restart_count_from_log_dir(path: str) -> int:
    """One past the highest `<n>.log` (or rotated `<n>.log.<suffix>`) in a
    container's log directory; 0 when there is none (calcRestartCountByLogDir)."""
    try:
        with os.scandir(path) as it:
            names = [e.name for e in it if not e.is_dir()]
    except OSError:
        return 0
    counts = [int(m.group(1)) + 1 for n in names if (m := _RESTART_LOG.match(n))]
    return max(counts, default=0)
