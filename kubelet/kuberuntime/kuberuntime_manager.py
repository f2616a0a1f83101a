"""The runtime manager: from a pod spec and its runtime status to CRI calls
(kuberuntime_manager.go).

compute_pod_actions() decides (pod_actions.py); sync_pod() carries the
decision out through the parts: sandboxes (kuberuntime_sandbox.py),
containers (kuberuntime_container.py) and images (kuberuntime_image.py).
Waiting reasons (ContainerCreating, CrashLoopBackOff, ErrImagePull, ...) are
kept per pod for the status manager.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from kubelet import metrics
from kubelet.allocation.allocation_manager import restarts_for
from kubelet.cm.dra.manager import DRAError
from kubelet.cm.interfaces import ContainerResourceManager
from kubelet.container.runtime import (
    RUNNING,
    ContainerStatus,
    PodStatus,
    RuntimeHelper,
    SandboxStatus,
)
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.events import Recorder
from kubelet.images.puller import ImagePuller
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.helpers import (
    PodReporter,
    RuntimeIdentity,
    SyncResult,
    UnnamedRuntime,
    Waiting,
    is_restartable_init,
)
from kubelet.kuberuntime.kuberuntime_container import ContainerManager
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_resources
from kubelet.kuberuntime.kuberuntime_image import ImageManager, PullCredentials
from kubelet.kuberuntime.kuberuntime_sandbox import (
    CreateSandboxError,
    SandboxManager,
    to_sandbox_status,
)
from kubelet.kuberuntime.pod_actions import (
    IsStarted,
    MustRestart,
    PodActions,
    Probes,
    compute_pod_actions,
)
from kubelet.kuberuntime.pod_resize import (
    Actuation,
    PodCgroups,
    PodResizer,
    ResizeError,
    best_actuated,
    compute_resize,
    needs_restart,
)
from kubelet.lifecycle.handlers import HandlerRunner
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassLookup
from kubelet.types import Container, Pod, Secret, host_network, is_static, name, namespace, uid
from kubelet.userns.userns_manager import UserNamespaces
from kubelet.util.pod_startup_latency import PodStartupLatencyTracker

__all__ = ["PodActions", "RuntimeManager", "SyncResult"]

log = logging.getLogger(__name__)

# Starts one container of the pod being synced; answers why it did not start.
_Start = Callable[[Container], Awaitable[str | None]]


class RuntimeManager:
    def __init__(
        self,
        runtime: RuntimeService,
        images: ImageService,
        helper: RuntimeHelper,
        pod_logs_dir: str,
        identity: RuntimeIdentity = UnnamedRuntime(),
        node: NodeSettings = NodeSettings(),
        cgroups_per_qos: bool = False,
        cgroup_root: str = "",
        crash_backoff: Backoff | None = None,
        image_backoff: Backoff | None = None,
        recorder: Recorder | None = None,
        must_restart: MustRestart | None = None,
        is_started: IsStarted | None = None,
        hooks: HandlerRunner | None = None,
        credentials: PullCredentials = PullCredentials(),
        runtime_classes: RuntimeClassLookup | None = None,
        image_puller: ImagePuller | None = None,
        startup: PodStartupLatencyTracker | None = None,
        container_resources: ContainerResourceManager | None = None,
        actuation: Actuation | None = None,
        pod_cgroups: PodCgroups | None = None,
        userns: UserNamespaces | None = None,
    ) -> None:
        self.runtime = runtime
        self.helper = helper
        self.reporter = PodReporter(recorder)
        self.container_resources = container_resources
        self.crash_backoff = crash_backoff or Backoff(10, 300)
        self.image_backoff = image_backoff or Backoff(10, 300)
        self.pull_secrets = credentials.pod_secrets
        # What the prober says: which containers must restart, which have started.
        self.probes = Probes(
            must_restart or (lambda _cid: None),
            is_started or (lambda _c, _cid: True),
            self._resize_restart,
        )
        # In-place resize (InPlacePodVerticalScaling): None when the gate is off.
        self.actuation = actuation
        # postStart and preStop hooks; httpGet hooks go to the pod's IP by default.
        self.hooks = hooks or HandlerRunner(runtime, self._pod_ips, recorder)
        self.node = node
        self.sandboxes = SandboxManager(
            runtime, helper, self.reporter, pod_logs_dir,
            runtime_classes=runtime_classes, seccomp_root=node.seccomp_root,
            cgroups_per_qos=cgroups_per_qos, cgroup_root=cgroup_root,
            user_namespaces_support=node.user_namespaces_support, userns=userns,
            resources=container_resources, cfs_period=node.cfs_period,
        )  # fmt: skip
        self.image_manager = ImageManager(images, self.reporter, self.image_backoff,
                                          image_puller or ImagePuller(), credentials, startup)  # fmt: skip
        self.containers = ContainerManager(
            runtime, images, helper, self.reporter, self.image_manager, self.hooks,
            self.crash_backoff, node, identity, container_resources,
        )  # fmt: skip
        self.resizer = (
            None if actuation is None else PodResizer(runtime, node, pod_cgroups, actuation)
        )

    # What the status manager shows of containers that do not run.
    @property
    def waiting(self) -> Waiting:
        return self.reporter.waiting

    @property
    def runtime_classes(self) -> RuntimeClassLookup | None:
        return self.sandboxes.runtime_classes

    async def close(self) -> None:
        await self.hooks.close()

    async def _pod_ips(self, pod: Pod) -> list[str]:
        return (await self.get_pod_status(uid(pod), name(pod), namespace(pod))).ips

    # -------------------------------------------------------------- status
    async def get_pod_status(self, pod_uid: str, pod_name: str = "", ns: str = "") -> PodStatus:
        sel = {L.POD_UID: pod_uid}
        sandboxes = await self.runtime.list_pod_sandbox(pb.PodSandboxFilter(label_selector=sel))
        containers = await self.runtime.list_containers(pb.ContainerFilter(label_selector=sel))
        sb_st, c_st = await asyncio.gather(
            asyncio.gather(*(self.sandboxes.status(s) for s in sandboxes), return_exceptions=True),
            asyncio.gather(
                *(self.containers.container_status(c) for c in containers), return_exceptions=True
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
        ips = next(([s.ip] for s in sbs if s.ready and s.ip), [])
        if sandboxes and not pod_name:
            md = sandboxes[0].metadata
            pod_name, ns = md.name, md.namespace
        return PodStatus(pod_uid, pod_name, ns, ips, sbs, cs, time.time())

    async def status_from_event(self, ev: pb.ContainerEventResponse) -> PodStatus:
        """A PodStatus from a container event, which carries the sandbox and all its
        containers (GeneratePodStatus upstream)."""
        sb = ev.pod_sandbox_status
        sandbox = to_sandbox_status(sb.id, sb)
        cs = [await self.containers.convert_container_status(c) for c in ev.containers_statuses]
        cs.sort(key=lambda c: c.created_at, reverse=True)
        ips = [sb.network.ip] if sandbox.ready and sb.network.ip else []
        md = sb.metadata
        return PodStatus(md.uid, md.name, md.namespace, ips, [sandbox], cs, time.time())

    # -------------------------------------------------------------- decide
    def compute_pod_actions(self, pod: Pod, status: PodStatus) -> PodActions:
        """What to do to bring the pod to its spec (computePodActions). Reads the
        probe results but changes nothing: a table test drives it directly."""
        return compute_pod_actions(pod, status, self.probes)

    # ----------------------------------------------------------------- act
    async def sync_pod(self, pod: Pod, status: PodStatus) -> SyncResult:
        """SyncPod: kill what must go, create the sandbox if needed, start what
        must run. Everything this sync learns (errors, back-off deadlines) goes
        into its own result: up to 256 pods sync concurrently through here."""
        res = SyncResult()
        a = self.compute_pod_actions(pod, status)
        userns_pod = (
            a.create_sandbox
            and self.node.user_namespaces_support
            and pod["spec"].get("hostUsers") is False
        )
        if userns_pod:
            metrics.STARTED_USERNS_PODS.inc()
        await self._sync(pod, status, a, res)
        if userns_pod and res.errors:
            metrics.STARTED_USERNS_PODS_ERRORS.inc()
        return res

    async def _sync(self, pod: Pod, status: PodStatus, a: PodActions, res: SyncResult) -> None:
        waiting = self.reporter.waiting_of(pod)
        await self._kill_step(pod, status, a)
        if a.kill_pod and not a.create_sandbox:
            return
        if not a.kill_pod:
            await self._resize_step(pod, status, a, res)
        if not a.starts_anything():
            # Nothing to create: the sandbox config (its DNS, and the warnings that
            # come with it) is not needed. Most syncs of a running pod end here.
            _clear_running_waiting(status, waiting, set())
            return
        if a.create_sandbox and not await self._prepare_dynamic_resources(pod, res):
            return
        try:
            sandbox_cfg = await self.sandboxes.config_for_sync(pod, a.attempt, a.create_sandbox)
            sid = a.sandbox_id
            if a.create_sandbox:
                sid = await self.sandboxes.create(pod, sandbox_cfg)
                res.sandbox_created = True
        except CreateSandboxError as err:
            res.errors.append(str(err))
            return
        pod_ips = list(status.ips)
        if res.sandbox_created and not host_network(pod):
            pod_ips = await self.sandboxes.pod_ips(pod, sid, pod_ips)
        secrets = await self._pull_secrets(pod)

        async def start(c: Container) -> str | None:
            return await self.containers.start_container(
                pod, sid, sandbox_cfg, c, status, res, pod_ips, pull_secrets=secrets
            )

        started = await self._start_containers(pod, a, start, res)
        if started is not None:
            _clear_running_waiting(status, waiting, started)

    async def _prepare_dynamic_resources(self, pod: Pod, res: SyncResult) -> bool:
        """The pod's ResourceClaims prepared before its sandbox (upstream's
        SyncPod); a failure is an event and a sync error, retried with back-off."""
        if self.container_resources is None:
            return True
        try:
            await self.container_resources.prepare_dynamic_resources(pod)
        except DRAError as err:
            msg = f"Failed to prepare dynamic resources: {err}"
            self.reporter.event(pod, "Warning", "FailedPrepareDynamicResources", msg)
            log.error("Failed to prepare dynamic resources for pod %s: %s", uid(pod), err)
            res.errors.append(msg)
            return False
        return True

    async def _kill_step(self, pod: Pod, status: PodStatus, a: PodActions) -> None:
        if a.kill_pod:
            await self.kill_pod(pod, status, None, remove=False)
            return
        await asyncio.gather(
            *(
                self.containers.kill_container(pod, cs, a.kill_grace.get(cs.id), msg)
                for cs, msg in a.containers_to_kill.values()
            )
        )

    def _resize_restart(self, pod: Pod, c: Container, running: ContainerStatus) -> bool:
        """Does the running container restart to take its allocation? Judged
        against what it was last set to, or, without a record of that (a pod
        from before the record was kept), what the runtime reports it runs
        with; never on a guess when neither knows."""
        if self.actuation is None or is_static(pod):
            return False
        actuated = best_actuated(self.actuation, pod, c, running)
        if actuated is None:
            if restarts_for(c, "memory") or restarts_for(c, "cpu"):
                log.warning("Pod %s/%s: container %s: neither a record nor the runtime says "
                            "what it runs with; its allocation is applied in place, not by "
                            "the RestartContainer policy", namespace(pod), name(pod),
                            c["name"])  # fmt: skip
            return False
        return needs_restart(c, actuated)

    async def _resize_step(
        self, pod: Pod, status: PodStatus, a: PodActions, res: SyncResult
    ) -> None:
        """The running containers take their allocated resources (after the
        kills, before the starts, as upstream's SyncPod)."""
        if self.resizer is None or self.actuation is None:
            return
        # Containers killed in this sync (a failed probe, a changed spec, a
        # resize restart) come back with their allocation: not updated here.
        killed = {st.name for st, _ in a.containers_to_kill.values()}
        actions = compute_resize(pod, status, self.actuation, killed, bool(a.resize_restarts))
        for c in actions.adopted:
            self.actuation.set_actuated(pod, c)
        if not actions:
            return
        res.resized = True
        try:
            await self.resizer.resize(pod, actions, a.sandbox_id)
        except ResizeError as err:
            log.warning("Pod %s/%s: resize failed: %s", namespace(pod), name(pod), err)
            res.resize_error = str(err)
            res.errors.append(f"failed to resize pod in place: {err}")  # retried with back-off

    async def _pull_secrets(self, pod: Pod) -> list[Secret]:
        """Read once per sync that starts containers (getPullSecretsForPod)."""
        if pod["spec"].get("imagePullSecrets") and self.pull_secrets is not None:
            return await self.pull_secrets.get_pull_secrets(pod)
        return []

    async def _start_containers(
        self, pod: Pod, a: PodActions, start: _Start, res: SyncResult
    ) -> set[str] | None:
        """Ephemeral, then init containers in order, then the regular ones at
        once. Answers the names started; None when a regular init container
        failed to start (the ones after it wait)."""
        spec = pod["spec"]
        # Ephemeral containers first: a debugger may be why the pod is looked at.
        for i in a.ephemeral_containers_to_start:
            problem = await start(spec["ephemeralContainers"][i])
            if problem:
                res.errors.append(problem)
        # A sidecar that fails to start does not hold back the ones after it.
        init = spec.get("initContainers") or []
        for i in a.init_containers_to_start:
            problem = await start(init[i])
            if problem:
                res.errors.append(problem)
                if not is_restartable_init(init[i]):
                    return None
            elif self.actuation is not None and is_restartable_init(init[i]):
                self.actuation.set_actuated(pod, init[i])
        # One after the other in the pod's order, as upstream: a postStart hook
        # holds back the containers after its own (pods rely on it to order
        # their start), and one that fails does not keep the others from starting.
        for i in a.containers_to_start:
            problem = await start(spec["containers"][i])
            if problem:
                res.errors.append(problem)
            elif self.actuation is not None:
                self.actuation.set_actuated(pod, spec["containers"][i])
        started = {spec["containers"][i]["name"] for i in a.containers_to_start}
        started.update(init[i]["name"] for i in a.init_containers_to_start)
        return started

    async def kill_pod(
        self, pod: Pod | None, status: PodStatus, grace: int | None, remove: bool
    ) -> None:
        """Stop every container (in parallel, with the grace period; sidecars after
        the main containers, in reverse order), then the sandboxes. With
        remove=True also remove them: the pod is gone for good."""
        await self.containers.kill_containers(pod, status, grace)
        sandbox_ids = [s.id for s in status.sandboxes]
        await self.sandboxes.stop(sandbox_ids)
        if remove:
            await self.containers.remove_containers(status)
            await self.sandboxes.remove(sandbox_ids)
            self.reporter.waiting.pop(status.id, None)
            self.image_manager.forget(status.id)

    # ------------------------------------------- what others read of the parts
    def sandbox_config(self, pod: Pod, attempt: int) -> pb.PodSandboxConfig:
        return self.sandboxes.sandbox_config(pod, attempt)

    def resources(self, pod: Pod, c: Container) -> pb.LinuxContainerResources:
        """The container's resources as the runtime is given them (for stats)."""
        return container_resources(pod, c, self.node)


def _clear_running_waiting(
    status: PodStatus, waiting: dict[str, tuple[str, str]], started: set[str]
) -> None:
    """Containers that run need no waiting reason; the rest keep theirs."""
    for cs in status.containers:
        if cs.state == RUNNING and cs.name not in started:
            waiting.pop(cs.name, None)
