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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubelet.cm.interfaces import ContainerResourceManager
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
from kubelet.credentialprovider.config import DockerConfigError
from kubelet.credentialprovider.keyring import DockerKeyring, ExternalKeyring, UnionDockerKeyring
from kubelet.credentialprovider.secrets import make_docker_keyring
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.events import Recorder
from kubelet.images.puller import ImagePuller, PullQPSExceeded
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime import legacy
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.kuberuntime_image import PullError, PullSecretsGetter, Secret, pull_image
from kubelet.kuberuntime.security_context import (
    SecurityContextError,
    container_security_context,
    image_user,
    namespace_options,
    sandbox_security_context,
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
from kubelet.network.dns import kernel_hostname
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassLookup
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
from kubelet.util import filesystem
from kubelet.util.duration import format_duration
from kubelet.util.parsers import ImageNameError, parse_image_name
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
    # The first of init_containers_to_start (kept for callers that want the spec).
    next_init_container: dict[str, Any] | None = None
    # Indexes into initContainers, in order (restartable ones may come with others).
    init_containers_to_start: list[int] = field(default_factory=list)
    containers_to_start: list[int] = field(default_factory=list)
    ephemeral_containers_to_start: list[int] = field(default_factory=list)
    # container ID -> (status, reason for the kill)
    containers_to_kill: dict[str, tuple[ContainerStatus, str]] = field(default_factory=dict)
    # container ID -> grace period of a kill the probe that failed sets
    # (its terminationGracePeriodSeconds), instead of the pod's.
    kill_grace: dict[str, int] = field(default_factory=dict)


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
        is_started: Callable[[dict[str, Any], str], bool] | None = None,
        hooks: HandlerRunner | None = None,
        seccomp_root: str = "/var/lib/kubelet/seccomp",
        seccomp_default: bool = False,
        pull_secrets: PullSecretsGetter | None = None,
        runtime_classes: RuntimeClassLookup | None = None,
        node_keyring: DockerKeyring | None = None,
        credential_plugins: ExternalKeyring | None = None,
        image_puller: ImagePuller | None = None,
        container_logs_dir: str = "",
        container_resources: ContainerResourceManager | None = None,
    ) -> None:
        self.runtime = runtime
        # serializeImagePulls / maxParallelImagePulls / registryPullQPS / registryBurst.
        self.image_puller = image_puller or ImagePuller()
        # Where the legacy log links go (/var/log/containers; "": none).
        self.container_logs_dir = container_logs_dir
        # CPU and memory pinning (the container manager's InternalContainerLifecycle).
        self.container_resources = container_resources
        # The pod's imagePullSecrets (None: no API server, pulls go anonymous).
        self.pull_secrets = pull_secrets
        # RuntimeClass name -> CRI runtime handler (None: no API server).
        self.runtime_classes = runtime_classes
        # The node's own docker config files, after the pod's secrets.
        self.node_keyring = node_keyring
        self.credential_plugins = credential_plugins
        self.images = images
        self.helper = helper
        # Localhost seccomp profiles live under <root-dir>/seccomp, as upstream.
        self.seccomp_root = seccomp_root
        self.seccomp_default = seccomp_default
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
        # (container spec, container ID) -> has its startup probe succeeded (True
        # without one): a sidecar gates the next init container on it.
        self.is_started: Callable[[dict[str, Any], str], bool] = is_started or (
            lambda _c, _cid: True
        )
        # postStart and preStop hooks; httpGet hooks go to the pod's IP by default.
        self.hooks = hooks or HandlerRunner(runtime, self._pod_ips, recorder)
        # pod UID -> container name -> (reason, message) while it is not running
        self.waiting: dict[str, dict[str, tuple[str, str]]] = {}
        self._pull_locks: dict[str, asyncio.Lock] = {}
        # pod UID -> image -> why its last pull failed, told while the back-off lasts.
        self._prev_pull_err: dict[str, dict[str, str]] = {}

    async def close(self) -> None:
        await self.hooks.close()

    async def _pod_ips(self, pod: Pod) -> list[str]:
        return (await self.get_pod_status(uid(pod), name(pod), namespace(pod))).ips

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

    def _termination_dir(self, pod_uid: str, container_name: str) -> str:
        """Where this container's termination-log files are ("" when its labels
        name no usable pod uid or container: then none is read)."""
        try:
            return pod_container_dir(self.helper.get_pod_dir(pod_uid), container_name)
        except ValueError:
            return ""

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
                self._termination_dir(st.labels.get(L.POD_UID, ""), c_name),
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
        """What to do to bring the pod to its spec (computePodActions). Reads the
        probe results but changes nothing: a table test drives it directly."""
        spec = pod["spec"]
        init = spec.get("initContainers") or []
        containers = spec["containers"]
        policy = restart_policy(pod)
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        a = PodActions()
        create, attempt, sid = self._sandbox_changed(pod, status)
        a.create_sandbox, a.attempt, a.sandbox_id = create, attempt, sid
        if create:
            # Whatever is left of the old sandbox goes first; the pod starts over.
            a.kill_pod = True
            if policy == "Never" and attempt != 0 and status.containers:
                a.create_sandbox = False  # the pod ran already and must not run again
                return a
            to_start = [
                i
                for i, c in enumerate(containers)
                if not (policy == "OnFailure" and _succeeded(status.find(c["name"])))
            ]
            if not to_start:
                done = (
                    _any_regular_created(containers, status)
                    if has_restartable_init(pod)
                    else _init_done(init, containers, status)
                )
                if done:
                    a.create_sandbox = False
                    return a
            if init:
                a.init_containers_to_start = [0]
                a.next_init_container = init[0]
                return a
            a.containers_to_start = to_start
            return a

        # Ephemeral containers start even while the pod initializes; never restarted.
        for i, ec in enumerate(spec.get("ephemeralContainers") or []):
            if status.find(ec["name"]) is None:
                a.ephemeral_containers_to_start.append(i)

        initialized = self._init_actions(pod, status, a)
        if a.init_containers_to_start:
            a.next_init_container = init[a.init_containers_to_start[0]]
        if a.kill_pod or not initialized:
            return a

        keep = 0
        for i, c in enumerate(containers):
            prev = status.find(c["name"])
            if prev is None or prev.state != RUNNING:
                if _should_restart(policy, prev, deleting):
                    a.containers_to_start.append(i)
                    if prev is not None and prev.state == UNKNOWN:
                        # It may still run: never two instances of one container.
                        msg = f'Container is in "{UNKNOWN}" state, try killing it before restart'
                        a.containers_to_kill[prev.id] = (prev, msg)
                continue
            restart = policy != "Never"
            want_hash = L.container_hash(c)
            why = self.must_restart(prev.id)
            if prev.hash and prev.hash != want_hash:
                msg = f"Container {c['name']} definition changed"
                restart = True  # a changed spec restarts whatever the policy
            elif why:
                msg = f"Container {c['name']} {why}"
                _probe_grace(pod, c, why, prev.id, a)
            else:
                keep += 1
                continue
            if restart:
                msg += ", will be restarted"
                a.containers_to_start.append(i)
            a.containers_to_kill[prev.id] = (prev, msg)
        wanted = {c["name"] for c in (*init, *containers, *(spec.get("ephemeralContainers") or []))}
        for cs in status.containers:
            if cs.state == RUNNING and cs.name not in wanted:
                a.containers_to_kill[cs.id] = (cs, "Container is not in the pod spec")
        if keep == 0 and not a.containers_to_start:
            # Nothing of the pod's own work is left: sidecars must not keep it alive.
            a.kill_pod = True
            a.init_containers_to_start = []
            a.next_init_container = None
        return a

    def _init_actions(self, pod: Pod, status: PodStatus, a: PodActions) -> bool:
        """Init containers, regular and restartable (computeInitContainerActions):
        fills `a` and answers whether the pod has initialized. Walks the list from
        the end, as the runtime may have removed init containers that finished."""
        init = pod["spec"].get("initContainers") or []
        if not init:
            return True
        on_failure = restart_policy(pod) != "Never"
        # A regular container that was created or runs: initialization happened
        # before, even if its init containers are gone from the runtime now.
        initialized = any(
            (s := status.find(c["name"])) is not None and s.state in (CREATED, RUNNING)
            for c in pod["spec"]["containers"]
        )
        prev_initialized = initialized
        start: list[int] = []
        last = len(init) - 1
        for i in range(last, -1, -1):
            c = init[i]
            sidecar = is_restartable_init(c)
            st = status.find(c["name"])
            if st is None:
                if prev_initialized and sidecar:
                    start.append(i)  # a sidecar gone from the runtime comes back
                continue
            if prev_initialized and not sidecar:
                continue  # after initialization only sidecars are kept running
            if st.state == CREATED:
                start.append(i)  # created but never started: start it again
            elif st.state == RUNNING:
                if sidecar:
                    initialized = (
                        self._sidecar_running(pod, c, st, i, last, prev_initialized, a, start)
                        or initialized
                    )
            elif st.state == EXITED:
                if sidecar:
                    start.append(i)
                elif _init_failed(st):
                    if not on_failure:
                        a.kill_pod = True
                        a.init_containers_to_start = []
                        return False
                    start.append(i)
                elif i == last:
                    initialized = True
                else:
                    start.append(i + 1)
            else:  # unknown: it may still run, kill it before a restart
                msg = f'Init container is in "{st.state}" state, try killing it before restart'
                if not sidecar and not on_failure:
                    a.kill_pod = True
                    a.init_containers_to_start = []
                    return False
                a.containers_to_kill[st.id] = (st, msg)
                start.append(i)
            prev_initialized = True
        if not prev_initialized:
            start.append(0)  # nothing ran yet: the first one
        a.init_containers_to_start = start[::-1]
        return initialized

    def _sidecar_running(
        self,
        pod: Pod,
        c: dict[str, Any],
        st: ContainerStatus,
        i: int,
        last: int,
        prev_initialized: bool,
        a: PodActions,
        start: list[int],
    ) -> bool:
        """A running restartable init container: does it gate the next one open,
        and must it be restarted? Answers whether the pod is now initialized."""
        why = self.must_restart(st.id)
        if "startupProbe" in c and not self.is_started(c, st.id):
            if why == "failed startup probe":
                _probe_grace(pod, c, why, st.id, a)
                a.containers_to_kill[st.id] = (
                    st,
                    f"Init container {c['name']} failed startup probe",
                )
                start.append(i)
            return False  # not started yet: the next one waits
        initialized = False
        if i == last:
            initialized = True
        elif not prev_initialized:
            start.append(i + 1)  # started for the first time: the next one may go
        if st.hash and st.hash != L.container_hash(c):
            a.containers_to_kill[st.id] = (st, f"Init container {c['name']} definition changed")
            start.append(i)
        elif why == "failed liveness probe":
            _probe_grace(pod, c, why, st.id, a)
            a.containers_to_kill[st.id] = (st, f"Init container {c['name']} failed liveness probe")
            start.append(i)
        return initialized

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
                    self.kill_container(pod, cs, a.kill_grace.get(cs.id), msg)
                    for cs, msg in a.containers_to_kill.values()
                )
            )
        if not (
            a.create_sandbox
            or a.containers_to_start
            or a.init_containers_to_start
            or a.ephemeral_containers_to_start
        ):
            # Nothing to create: the sandbox config (its DNS, and the warnings that
            # come with it) is not needed. Most syncs of a running pod end here.
            self._clear_running_waiting(status, waiting, set())
            return res
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
            handler = ""
            rc_name = pod["spec"].get("runtimeClassName") or ""
            if rc_name and self.runtime_classes is None:
                # Standalone: no API server to read RuntimeClasses from.
                log.warning(
                    "Pod %s: runtimeClassName %r ignored: no API server to look it up in; "
                    "the runtime's default handler runs the pod",
                    format_pod(pod),
                    rc_name,
                )
            elif rc_name and self.runtime_classes is not None:
                try:
                    handler = await self.runtime_classes.lookup_runtime_handler(rc_name)
                except LookupError as err:  # not found, or the lookup failed
                    msg = f"Failed to create pod sandbox: {err}"
                    self._event(pod, "Warning", "FailedCreatePodSandBox", msg)
                    res.errors.append(msg)
                    return res
            try:
                sid = await self.runtime.run_pod_sandbox(sandbox_cfg, handler)
            except errors.CRIError as err:
                msg = f"Failed to create pod sandbox: {err.message}"
                self._event(pod, "Warning", "FailedCreatePodSandBox", msg)
                res.errors.append(msg)
                return res
            res.sandbox_created = True
        pod_ips = list(status.ips)
        if res.sandbox_created and not host_network(pod):
            # The new sandbox's IPs: the containers' env (status.podIP) needs them now.
            try:
                st = (await self.runtime.pod_sandbox_status(sid)).status
                pod_ips = [
                    ip for ip in (st.network.ip, *(a.ip for a in st.network.additional_ips)) if ip
                ]
            except errors.CRIError as err:
                log.warning("Pod %s: no status for its new sandbox: %s", format_pod(pod), err)
        spec = pod["spec"]
        # Read once per sync that starts containers (getPullSecretsForPod).
        secrets: list[Secret] = []
        if spec.get("imagePullSecrets") and self.pull_secrets is not None:
            secrets = await self.pull_secrets.get_pull_secrets(pod)
        # Ephemeral containers first: a debugger may be why the pod is looked at.
        for i in a.ephemeral_containers_to_start:
            ec = spec["ephemeralContainers"][i]
            problem = await self.start_container(
                pod, sid, sandbox_cfg, ec, status, res, pod_ips, pull_secrets=secrets
            )
            if problem:
                res.errors.append(problem)
        # Init containers in order; a sidecar that fails to start does not hold
        # back the ones after it, a regular init container does.
        init = spec.get("initContainers") or []
        for i in a.init_containers_to_start:
            problem = await self.start_container(
                pod, sid, sandbox_cfg, init[i], status, res, pod_ips, pull_secrets=secrets
            )
            if problem:
                res.errors.append(problem)
                if not is_restartable_init(init[i]):
                    return res
        # One after the other in the pod's order, as upstream: a postStart hook
        # holds back the containers after its own (pods rely on it to order
        # their start), and one that fails does not keep the others from starting.
        for i in a.containers_to_start:
            problem = await self.start_container(
                pod, sid, sandbox_cfg, spec["containers"][i], status, res, pod_ips,
                pull_secrets=secrets,
            )  # fmt: skip
            if problem:
                res.errors.append(problem)
        started = {spec["containers"][i]["name"] for i in a.containers_to_start}
        started.update(init[i]["name"] for i in a.init_containers_to_start)
        self._clear_running_waiting(status, waiting, started)
        return res

    @staticmethod
    def _clear_running_waiting(
        status: PodStatus, waiting: dict[str, tuple[str, str]], started: set[str]
    ) -> None:
        """Containers that run need no waiting reason; the rest keep theirs."""
        for cs in status.containers:
            if cs.state == RUNNING and cs.name not in started:
                waiting.pop(cs.name, None)

    async def start_container(
        self,
        pod: Pod,
        sid: str,
        sandbox_cfg: pb.PodSandboxConfig,
        c: dict[str, Any],
        status: PodStatus,
        res: SyncResult,
        pod_ips: list[str],
        pull_secrets: list[Secret] | None = None,
    ) -> str | None:
        """Start one container; returns an error message (also kept as its waiting
        reason). A back-off that blocks it is recorded in `res`. pod_ips: the
        sandbox's, asked again when this sync created the sandbox."""
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
        image_ref, image, err = await self.ensure_image(
            pod, c, sandbox_cfg, res, pull_secrets or []
        )
        if err:
            return err
        if prev is not None:
            restart = prev.restart_count + 1
        else:
            # No container of this name in the runtime: a runtime that lost its
            # state (restarted empty, node reboot) must not start the count and
            # the log file again at 0, so count on from the logs on disk.
            restart = restart_count_from_log_dir(os.path.join(sandbox_cfg.log_directory, c["name"]))
        try:
            if image is None:  # just pulled: the user the image runs as (getImageUser)
                image = await self.images.image_status(pb.ImageSpec(image=image_ref))
            image_uid, image_username = image_user(image)
            problem = verify_run_as_non_root(pod, c, image_uid, image_username)
            if problem:
                raise ContainerConfigError(problem)
            opts = await self.helper.generate_run_container_options(pod, c, pod_ips)
            cfg = self.container_config(
                pod, c, restart, image_ref or c["image"], chash, opts, image_uid, image_username
            )
            if self.container_resources is not None:  # PreCreateContainer
                pin = self.container_resources.container_cpuset(pod, c)
                lr = cfg.linux.resources
                lr.cpuset_cpus, lr.cpuset_mems = pin.cpuset_cpus, pin.cpuset_mems
                if pin.unlimited_quota and lr.cpu_quota:
                    lr.cpu_quota = -1
        except (ContainerConfigError, SecurityContextError, errors.CRIError) as e:
            msg = e.message if isinstance(e, errors.CRIError) else str(e)
            waiting[cname] = (ContainerConfigError.reason, msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        target_name = c.get("targetContainerName")
        if target_name:
            # An ephemeral container sharing the process namespace of its target.
            target = status.find(target_name)
            if target is None or target.state != RUNNING:
                msg = f"target container {target_name} is not running"
                waiting[cname] = ("CreateContainerError", msg)
                self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
                return msg
            cfg.linux.security_context.namespace_options.CopyFrom(
                namespace_options(pod, pid_target=target.id)
            )
        try:
            cid = await self.runtime.create_container(sid, cfg, sandbox_cfg)
        except errors.CRIError as e:
            msg = e.message
            waiting[cname] = ("CreateContainerError", msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        if self.container_resources is not None:  # PreStartContainer
            self.container_resources.container_created(pod, c, cid)
        self._event(pod, "Normal", "Created", f"Created container: {cname}", cname)
        try:
            await self.runtime.start_container(cid)
        except errors.CRIError as e:
            msg = e.message
            waiting[cname] = ("RunContainerError", msg)
            self._event(pod, "Warning", "Failed", f"Error: {msg}", cname)
            return msg
        self._event(pod, "Normal", "Started", f"Started container {cname}", cname)
        if self.container_logs_dir:
            link = legacy.log_symlink(
                self.container_logs_dir, name(pod), namespace(pod), cname, cid
            )
            legacy.create(os.path.join(sandbox_cfg.log_directory, cfg.log_path), link)
        post_start = (c.get("lifecycle") or {}).get("postStart")
        if post_start:
            # Part of the start, as upstream: the sync (and so the status that
            # would say Running) waits for the hook.
            hook_err = await self.hooks.run(cid, pod, c, post_start)
            if hook_err is not None:
                log.info("postStart hook of %s/%s failed: %s", format_pod(pod), cname, hook_err)
                # The event leaves the message out: it may hold secrets.
                self._event(pod, "Warning", "FailedPostStartHook", "PostStartHook failed", cname)
                killed = ContainerStatus(cid, cname, RUNNING, runtime=self.runtime_name)
                try:
                    await self.kill_container(pod, killed, None, "FailedPostStartHook")
                except errors.CRIError as err:
                    log.warning("killing %s after its postStart hook failed: %s", cid, err)
                waiting[cname] = ("PostStartHookError", hook_err)
                return hook_err
        waiting.pop(cname, None)
        return None

    async def ensure_image(
        self,
        pod: Pod,
        c: dict[str, Any],
        sandbox_cfg: pb.PodSandboxConfig,
        res: SyncResult,
        pull_secrets: list[Secret] | None = None,
    ) -> tuple[str, pb.Image | None, str | None]:
        """EnsureImageExists with pull policies, pull secrets and ImagePullBackOff.
        Returns (ref, the image when its status is known, error)."""
        image = c["image"]
        cname = c["name"]
        waiting = self.waiting.setdefault(uid(pod), {})

        def fail(reason: str, msg: str) -> tuple[str, pb.Image | None, str | None]:
            # startContainer's event: the error's name, not its message.
            waiting[cname] = (reason, msg)
            self._event(pod, "Warning", "Failed", f"Error: {reason}", cname)
            return "", None, msg

        try:
            repo, _tag, _digest = parse_image_name(image)
        except ImageNameError as err:
            msg = f'Failed to apply default image tag "{image}": {err}'
            self._event(pod, "Warning", "InspectFailed", msg, cname)
            return fail("InvalidImageName", msg)
        policy = c.get("imagePullPolicy", "IfNotPresent")
        spec = pb.ImageSpec(image=image)
        try:
            present = await self.images.image_status(spec)
        except errors.CRIError as err:
            msg = f'Failed to inspect image "{image}": {err.message}'
            self._event(pod, "Warning", "InspectFailed", msg, cname)
            return fail("ImageInspectError", msg)
        if policy == "Never":
            if present is None:
                msg = f'Container image "{image}" is not present with pull policy of Never'
                self._event(pod, "Warning", "ErrImageNeverPull", msg, cname)
                return fail("ErrImageNeverPull", msg)
            return str(present.id), present, None
        if policy == "IfNotPresent" and present is not None:
            return str(present.id), present, None
        try:
            keyrings: list[DockerKeyring] = [make_docker_keyring(pull_secrets or [])]
            if self.node_keyring is not None:
                keyrings.append(self.node_keyring)
            credentials = UnionDockerKeyring(keyrings).lookup(repo)
        except DockerConfigError as err:
            # Upstream's error is its own reason: no pull is attempted, no back-off.
            return fail(str(err), str(err))
        if self.credential_plugins is not None:
            # After the pull secrets and the node's own, as upstream's union.
            credentials += await self.credential_plugins.lookup(repo, pod)
        key = f"{uid(pod)}_{image}"
        # "Is the time since the last failed pull shorter than the back-off?"
        # (IsInBackOffSinceUpdate upstream): 10 s, 20 s, 40 s ... after each failure.
        if self.image_backoff.in_backoff_since_update(key):
            res.backoff_until(self.image_backoff.remaining(key))
            msg = f'Back-off pulling image "{image}"'
            self._event(pod, "Normal", "BackOff", msg, cname)
            prev = self._prev_pull_err.get(uid(pod), {}).get(image)
            return fail("ImagePullBackOff", f"{msg}: {prev}" if prev else msg)
        self._prev_pull_err.get(uid(pod), {}).pop(image, None)
        self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"', cname)
        lock = self._pull_locks.setdefault(image, asyncio.Lock())
        t = time.monotonic()

        async def timed_pull() -> tuple[str, float]:
            start = time.monotonic()
            ref, _used = await pull_image(self.images, spec, credentials, sandbox_cfg)
            return ref, time.monotonic() - start

        try:
            async with lock:  # never two pulls of one image at once
                ref, took = await self.image_puller.pull(timed_pull)
        except (PullError, PullQPSExceeded) as err:
            self.image_backoff.next(key, self.image_backoff.now())
            self._event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {err}', cname)
            self._prev_pull_err.setdefault(uid(pod), {})[image] = f"ErrImagePull: {err}"
            return fail("ErrImagePull", str(err))
        self._event(
            pod,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {took:.3f}s '
            f"({time.monotonic() - t:.3f}s including waiting)",
            cname,
        )
        return ref, None, None

    # ---------------------------------------------------------------- kill
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
            self._event(
                pod, "Normal", "Killing", message or f"Stopping container {cs.name}", cs.name
            )
        pre_stop = ((spec or {}).get("lifecycle") or {}).get("preStop")
        if pod is not None and spec is not None and pre_stop and grace > 0:
            grace -= await self._pre_stop(pod, spec, cs, pre_stop, grace)
        if ordering is not None and grace > 0:
            grace -= int(await ordering.wait_for_turn(cs.name, grace))
        try:
            await self.runtime.stop_container(cs.id, max(grace, MIN_GRACE_SECONDS))
        except errors.NotFoundError:
            pass

    async def _pre_stop(
        self, pod: Pod, spec: dict[str, Any], cs: ContainerStatus, hook: dict[str, Any], grace: int
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
            self._event(pod, "Warning", "FailedPreStopHook", "PreStopHook failed", cs.name)
        return int(time.monotonic() - start)

    async def kill_pod(
        self, pod: Pod | None, status: PodStatus, grace: int | None, remove: bool
    ) -> None:
        """Stop every container (in parallel, with the grace period; sidecars after
        the main containers, in reverse order), then the sandboxes. With
        remove=True also remove them: the pod is gone for good."""
        running = [c for c in status.containers if c.state in (RUNNING, CREATED, UNKNOWN)]
        ordering = (
            TerminationOrdering(pod, {c.name for c in running})
            if pod is not None and has_restartable_init(pod)
            else None
        )
        await asyncio.gather(
            *(self.kill_container(pod, c, grace, ordering=ordering) for c in running)
        )
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
                if self.container_resources is not None:  # PostStopContainer
                    self.container_resources.remove_container(c.id)
            for s in status.sandboxes:
                try:
                    await self.runtime.remove_pod_sandbox(s.id)
                except errors.NotFoundError:
                    pass
            self.waiting.pop(status.id, None)
            self._prev_pull_err.pop(status.id, None)

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
        linux = pb.LinuxPodSandboxConfig(
            cgroup_parent=self.pod_cgroup_parent(pod),
            security_context=sandbox_security_context(
                pod, seccomp_root=self.seccomp_root, user_namespaces_support=False
            ),
            sysctls=sandbox_sysctls(pod),  # admitted against the allowlist at the door
        )
        overhead = spec.get("overhead") or {}
        if overhead:
            # What the RuntimeClass says the sandbox costs, as requests == limits,
            # for runtimes that size a VM by it (convertOverheadToLinuxResources).
            cpu_m = cpu_millis(overhead.get("cpu") or 0)
            linux.overhead.CopyFrom(
                pb.LinuxContainerResources(
                    cpu_shares=max(2, cpu_m * 1024 // 1000),
                    cpu_period=100000,
                    cpu_quota=max(1000, cpu_m * 100) if cpu_m else 0,
                    memory_limit_in_bytes=to_bytes(overhead.get("memory") or 0),
                )
            )
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(
                name=name(pod), uid=uid(pod), namespace=namespace(pod), attempt=attempt
            ),
            hostname=hostname,
            log_directory=os.path.join(
                self.pod_logs_dir,
                filesystem.component(
                    f"{namespace(pod)}_{name(pod)}_{uid(pod)}", "pod log directory"
                ),
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
        image_uid: int | None = None,
        image_username: str = "",
    ) -> pb.ContainerConfig:
        """SecurityContextError when the security context cannot be expressed."""
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
        lsc = container_security_context(
            pod,
            c,
            seccomp_root=self.seccomp_root,
            image_uid=image_uid,
            image_username=image_username,
            seccomp_default=self.seccomp_default,
            user_namespaces_support=False,  # no runtime here supports user namespaces
        )
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
            log_path=f"{filesystem.component(c['name'], 'container name')}/{restart}.log",
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


class TerminationOrdering:
    """Sidecars stop last (terminationOrdering upstream): each running restartable
    init container waits for every main container and every sidecar after it
    in the spec. Built per kill, never shared between pods."""

    def __init__(self, pod: Pod, running: set[str]) -> None:
        self._done = {n: asyncio.Event() for n in running}
        mains = [c["name"] for c in pod["spec"]["containers"] if c["name"] in running]
        sidecars = [
            c["name"]
            for c in pod["spec"].get("initContainers") or []
            if is_restartable_init(c) and c["name"] in running
        ]
        self._after: dict[str, list[str]] = {
            s: mains + sidecars[i + 1 :] for i, s in enumerate(sidecars)
        }

    async def wait_for_turn(self, cname: str, timeout: float) -> float:
        """Wait (at most timeout seconds) until the containers this one follows
        have stopped; answers the seconds waited."""
        start = time.monotonic()
        waits = [self._done[n].wait() for n in self._after.get(cname, ())]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout)
            except TimeoutError:
                pass
        return time.monotonic() - start

    def terminated(self, cname: str) -> None:
        ev = self._done.get(cname)
        if ev is not None:
            ev.set()


def find_container_spec(pod: Pod, cname: str) -> dict[str, Any] | None:
    spec = pod["spec"]
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            if c.get("name") == cname:
                return dict(c)
    return None


_PROBE_OF = {"failed liveness probe": "livenessProbe", "failed startup probe": "startupProbe"}


def _probe_grace(pod: Pod, c: dict[str, Any], why: str, cid: str, a: PodActions) -> None:
    """A probe's terminationGracePeriodSeconds governs the kill it causes, unless
    the pod is being deleted (setTerminationGracePeriod upstream)."""
    if pod["metadata"].get("deletionGracePeriodSeconds") is not None:
        return
    g = (c.get(_PROBE_OF.get(why, "")) or {}).get("terminationGracePeriodSeconds")
    if g is not None:
        a.kill_grace[cid] = int(g)


def pod_grace_period(pod: Pod) -> int:
    """deletionGracePeriodSeconds when the pod is being deleted, else the spec's."""
    g = pod["metadata"].get("deletionGracePeriodSeconds")
    return int(g) if g is not None else grace_period(pod)


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


def is_restartable_init(c: dict[str, Any]) -> bool:
    """A sidecar: an init container with restartPolicy Always."""
    return c.get("restartPolicy") == "Always"


def has_restartable_init(pod: Pod) -> bool:
    return any(is_restartable_init(c) for c in pod["spec"].get("initContainers") or [])


def _succeeded(st: ContainerStatus | None) -> bool:
    return st is not None and st.state == EXITED and st.exit_code == 0


def _init_failed(st: ContainerStatus) -> bool:
    if "OOMKilled" in st.reason:
        return True
    return (st.state == EXITED and st.exit_code != 0) or st.state == UNKNOWN


def _any_regular_created(containers: list[dict[str, Any]], status: PodStatus) -> bool:
    return any(
        (s := status.find(c["name"])) is not None and s.state in (CREATED, RUNNING, EXITED)
        for c in containers
    )


def _init_done(
    init: list[dict[str, Any]], containers: list[dict[str, Any]], status: PodStatus
) -> bool:
    """Every (regular) init container ran to success (findNextInitContainerToRun's done)."""
    if not init:
        return True
    if any((s := status.find(c["name"])) is not None and s.state == RUNNING for c in containers):
        return True
    for c in init:
        s = status.find(c["name"])
        if s is not None and _init_failed(s):
            return False
    s = status.find(init[-1]["name"])
    return s is not None and s.state == EXITED


def _should_restart(policy: str, prev: ContainerStatus | None, deleting: bool = False) -> bool:
    if deleting:
        return False  # a pod being deleted starts nothing again
    if prev is None or prev.state in (CREATED, UNKNOWN):
        return True
    if prev.state == RUNNING:
        return False
    if policy == "Never":
        return False
    if policy == "OnFailure" and prev.exit_code == 0:
        return False
    return True
