"""Pod sandboxes: their config, creation, status and teardown
(kuberuntime_sandbox.go, kuberuntime_sandbox_linux.go)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from kubelet.cm.cgroup_manager import (
    DEFAULT_CPU_PERIOD,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from kubelet.cm.interfaces import ContainerResourceManager
from kubelet.container.runtime import RuntimeHelper, SandboxStatus
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import RuntimeService
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.helpers import PodReporter, each_ignoring_gone, format_pod
from kubelet.kuberuntime.security_context import sandbox_security_context
from kubelet.lifecycle.handlers import go_quote
from kubelet.network.dns import kernel_hostname
from kubelet.resourcehelper import pod_limits, pod_requests
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassLookup
from kubelet.sysctl import sandbox_sysctls
from kubelet.types import Pod, ResourceList, host_network, name, namespace, qos_class, uid
from kubelet.userns.userns_manager import UserNamespaces
from kubelet.util import filesystem
from kubelet.util.quantity import cpu_millis, to_bytes

log = logging.getLogger(__name__)


class CreateSandboxError(Exception):
    """The sandbox could not be created; the event about it is sent already."""


def to_sandbox_status(sid: str, st: pb.PodSandboxStatus) -> SandboxStatus:
    return SandboxStatus(
        sid,
        st.state == pb.SANDBOX_READY,
        st.created_at,
        st.metadata.attempt,
        st.network.ip,
        st.linux.namespaces.options.network == pb.NODE,
    )


class SandboxManager:
    def __init__(
        self,
        runtime: RuntimeService,
        helper: RuntimeHelper,
        reporter: PodReporter,
        pod_logs_dir: str,
        *,
        runtime_classes: RuntimeClassLookup | None,
        seccomp_root: str,
        cgroups_per_qos: bool,
        cgroup_root: str,
        user_namespaces_support: bool = True,
        userns: UserNamespaces | None = None,
        resources: ContainerResourceManager | None = None,
        cfs_period: int | None = DEFAULT_CPU_PERIOD,
    ) -> None:
        self.cfs_period = cfs_period
        self.user_namespaces_support = user_namespaces_support
        # The pod has pinned CPUs and so no CFS quota (DisableCPUQuotaWithExclusiveCPUs).
        self.exclusive_cpus: Callable[[Pod], bool] = (
            resources.pod_has_exclusive_cpus if resources is not None else lambda _pod: False
        )
        # Pods' user namespace mappings (None: hostUsers: false pods are refused).
        self.userns = userns
        self.runtime = runtime
        self.helper = helper
        self.reporter = reporter
        self.pod_logs_dir = pod_logs_dir
        # RuntimeClass name -> CRI runtime handler (None: no API server).
        self.runtime_classes = runtime_classes
        # Localhost seccomp profiles live under <root-dir>/seccomp, as upstream.
        self.seccomp_root = seccomp_root
        self.cgroups_per_qos = cgroups_per_qos
        self.cgroup_root = cgroup_root

    # -------------------------------------------------------------- status
    async def status(self, s: pb.PodSandbox) -> SandboxStatus:
        return to_sandbox_status(s.id, (await self.runtime.pod_sandbox_status(s.id)).status)

    async def pod_ips(self, pod: Pod, sid: str, fallback: list[str]) -> list[str]:
        """The IPs of a sandbox just created (determinePodSandboxIPs): the
        containers' env (status.podIP) needs them now."""
        try:
            st = (await self.runtime.pod_sandbox_status(sid)).status
        except errors.CRIError as err:
            log.warning("Pod %s: no status for its new sandbox: %s", format_pod(pod), err)
            return fallback
        return [ip for ip in (st.network.ip, *(a.ip for a in st.network.additional_ips)) if ip]

    # -------------------------------------------------------------- create
    async def config_for_sync(self, pod: Pod, attempt: int, creating: bool) -> pb.PodSandboxConfig:
        """sandbox_config, its failure told as upstream's SyncPod does: when the
        sandbox was to be created, the event carries the bare error (the message
        the node e2e's FQDN spec waits for); for an existing one, no event."""
        try:
            return self.sandbox_config(pod, attempt, await self._pod_userns(pod))
        except ValueError as err:  # resolv.conf, the hostname, user namespace mappings
            if creating:
                self._event(pod, str(err))
                why = (
                    f"Failed to generate sandbox config for pod {go_quote(format_pod(pod))}: {err}"
                )
            else:
                why = f"GeneratePodSandboxConfig for pod {go_quote(format_pod(pod))} failed: {err}"
            raise CreateSandboxError(why) from err

    async def create(self, pod: Pod, cfg: pb.PodSandboxConfig) -> str:
        """createPodSandbox: the log directory, the runtime handler of the pod's
        RuntimeClass, then RunPodSandbox. Raises CreateSandboxError."""
        os.makedirs(cfg.log_directory, exist_ok=True)
        handler = await self._runtime_handler(pod)
        try:
            return await self.runtime.run_pod_sandbox(cfg, handler)
        except errors.CRIError as err:
            raise self._failed(pod, err.message) from err

    async def _pod_userns(self, pod: Pod) -> pb.UserNamespace | None:
        """The pod's own user namespace (hostUsers: false) from the manager,
        which checks that the pod's runtime handler supports one. Raises
        UsernsError (a ValueError). Host-user pods: None, namespace_options
        says NODE itself."""
        if self.userns is None or pod["spec"].get("hostUsers") is not False:
            return None
        return await self.userns.get_or_create(pod, await self._runtime_handler(pod))

    async def _runtime_handler(self, pod: Pod) -> str:
        rc_name = pod["spec"].get("runtimeClassName") or ""
        if not rc_name:
            return ""
        if self.runtime_classes is None:
            # Standalone: no API server to read RuntimeClasses from.
            log.warning(
                "Pod %s: runtimeClassName %r ignored: no API server to look it up in; "
                "the runtime's default handler runs the pod",
                format_pod(pod),
                rc_name,
            )
            return ""
        try:
            return await self.runtime_classes.lookup_runtime_handler(rc_name)
        except LookupError as err:  # not found, or the lookup failed
            raise self._failed(pod, str(err)) from err

    def _failed(self, pod: Pod, why: str) -> CreateSandboxError:
        return CreateSandboxError(self._event(pod, why))

    def _event(self, pod: Pod, why: str) -> str:
        msg = f"Failed to create pod sandbox: {why}"
        self.reporter.event(pod, "Warning", "FailedCreatePodSandBox", msg)
        return msg

    # -------------------------------------------------------------- config
    def sandbox_config(
        self, pod: Pod, attempt: int, userns: pb.UserNamespace | None = None
    ) -> pb.PodSandboxConfig:
        """generatePodSandboxConfig. ValueError: a bad hostname, resolv.conf
        unreadable, a hostUsers: false pod without `userns`."""
        hostname = self._hostname(pod)
        linux = pb.LinuxPodSandboxConfig(
            cgroup_parent=self.pod_cgroup_parent(pod),
            security_context=sandbox_security_context(
                pod,
                seccomp_root=self.seccomp_root,
                user_namespaces_support=self.user_namespaces_support,
                userns=userns,
            ),
            sysctls=sandbox_sysctls(pod),  # admitted against the allowlist at the door
        )
        # For runtimes that size the sandbox itself (VMs): the pod's resources
        # and, apart, the RuntimeClass's overhead (applySandboxResources).
        linux.resources.CopyFrom(sandbox_resources(pod, self.exclusive_cpus(pod), self.cfs_period))
        overhead = pod["spec"].get("overhead") or {}
        if overhead:
            linux.overhead.CopyFrom(overhead_resources(overhead))
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
            port_mappings=_port_mappings(pod),
            labels=L.sandbox_labels(pod),
            annotations=L.sandbox_annotations(pod),
            linux=linux,
        )

    def _hostname(self, pod: Pod) -> str:
        # Host-network sandboxes get an empty hostname: the runtime then uses the
        # node's, which is what they share anyway.
        if host_network(pod):
            return ""
        host, domain = self.helper.generate_pod_hostname_and_domain(pod)
        return kernel_hostname(host, domain, bool(pod["spec"].get("setHostnameAsFQDN")))

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

    # ------------------------------------------------------------ teardown
    async def stop(self, sandbox_ids: list[str]) -> None:
        await each_ignoring_gone(self.runtime.stop_pod_sandbox, sandbox_ids)

    async def remove(self, sandbox_ids: list[str]) -> None:
        await each_ignoring_gone(self.runtime.remove_pod_sandbox, sandbox_ids)


def _port_mappings(pod: Pod) -> list[pb.PortMapping]:
    return [
        pb.PortMapping(
            protocol=p.get("protocol", "TCP"),  # the enum value by name
            container_port=int(p["containerPort"]),
            host_port=int(p["hostPort"]),
            host_ip=p.get("hostIP", ""),
        )
        for c in pod["spec"]["containers"]
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def overhead_resources(overhead: ResourceList) -> pb.LinuxContainerResources:
    """What the RuntimeClass says the sandbox costs, as requests == limits, for
    runtimes that size a VM by it (convertOverheadToLinuxResources)."""
    cpu_m = cpu_millis(overhead.get("cpu") or 0)
    return pb.LinuxContainerResources(
        cpu_shares=milli_cpu_to_shares(cpu_m),
        cpu_period=100000,
        cpu_quota=max(1000, cpu_m * 100) if cpu_m else 0,
        memory_limit_in_bytes=to_bytes(overhead.get("memory") or 0),
    )


def sandbox_resources(
    pod: Pod, no_quota: bool, cfs_period: int | None = DEFAULT_CPU_PERIOD
) -> pb.LinuxContainerResources:
    """calculateSandboxResources: the pod's requests and limits (pod-level
    where set) without the overhead; cpu shares from the request, else the
    limit; with cpuCFSQuota the period and a quota for a cpu limit (-1 with
    pinned CPUs); a memory limit where one is set."""
    req, lim = pod_requests(pod, overhead=False), pod_limits(pod, overhead=False)
    cpu_lim = lim.get("cpu", 0)
    shares_from = req["cpu"] if "cpu" in req else cpu_lim
    out = pb.LinuxContainerResources(cpu_shares=milli_cpu_to_shares(shares_from))
    if cfs_period is not None:  # cpuCFSQuota
        out.cpu_period = cfs_period
        out.cpu_quota = -1 if no_quota else milli_cpu_to_quota(cpu_lim, cfs_period)
    if lim.get("memory"):
        out.memory_limit_in_bytes = lim["memory"]
    return out


def _shares_to_milli(shares: int) -> int:
    """sharesToMilliCPU: shares below the minimum stand for no CPU."""
    return -(-shares * 1000 // 1024) if shares >= 2 else 0


def sandbox_resources_update(
    pod: Pod, pod_cgroup: Mapping[str, int]
) -> tuple[pb.LinuxContainerResources, pb.LinuxContainerResources]:
    """UpdatePodSandboxResources' overhead and resources
    (generateUpdatePodSandboxResourcesRequest): the pod cgroup's cpu and memory
    values (as `update` takes them, -1 unlimited) less spec.overhead, which
    goes on its own."""
    overhead = pod["spec"].get("overhead") or {}
    res = pb.LinuxContainerResources()
    shares, quota = pod_cgroup.get("cpu_shares"), pod_cgroup.get("cpu_quota")
    period, memory = pod_cgroup.get("cpu_period"), pod_cgroup.get("memory_limit")
    o_cpu, o_mem = cpu_millis(overhead.get("cpu") or 0), to_bytes(overhead.get("memory") or 0)
    if period is not None and quota is not None:
        res.cpu_period = period
        res.cpu_quota = quota - milli_cpu_to_quota(o_cpu, period) if quota > 0 else quota
    if shares is not None:
        res.cpu_shares = milli_cpu_to_shares(_shares_to_milli(shares) - o_cpu) if o_cpu else shares
    if memory is not None and memory > 0:
        res.memory_limit_in_bytes = memory - o_mem
    return (overhead_resources(overhead) if overhead else pb.LinuxContainerResources()), res
