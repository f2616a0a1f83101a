"""The CRI config of one container (generateContainerConfig in
kuberuntime_container.go, generateLinuxContainerConfig and
calculateLinuxResources in kuberuntime_container_linux.go)."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet.cm import hugepages
from kubelet.cm.cgroup_manager import DEFAULT_CPU_PERIOD, milli_cpu_to_quota, milli_cpu_to_shares
from kubelet.container.expansion import expand_command_and_args
from kubelet.container.runtime import RunContainerOptions
from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.security_context import container_security_context
from kubelet.kuberuntime.swap import SwapConfig
from kubelet.kuberuntime.swap import configure as configure_swap
from kubelet.resourcehelper import (
    aggregate_container_requests,
    container_requests,
    is_pod_level_requests_set,
    is_pod_level_resources_set,
    pod_level_requests,
)
from kubelet.types import Container, Pod, Quantity, qos_class
from kubelet.util import filesystem
from kubelet.util.quantity import cpu_millis, to_bytes

_PROPAGATION = {
    "": pb.PROPAGATION_PRIVATE,
    "None": pb.PROPAGATION_PRIVATE,
    "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL,
}


@dataclass(frozen=True)
class NodeSettings:
    """What of the node every container's config depends on."""

    node_memory: int = 0  # bytes; 0: unknown (Burstable pods get oom_score_adj 999)
    # Localhost seccomp profiles live under <root-dir>/seccomp, as upstream.
    seccomp_root: str = "/var/lib/kubelet/seccomp"
    seccomp_default: bool = False
    # The UserNamespacesSupport gate: on, host-user pods (hostUsers true or
    # unset) say NODE to the runtime; off, setting hostUsers is an error.
    user_namespaces_support: bool = True
    # memorySwap.swapBehavior and the node's swap (None: no swap settings).
    swap: SwapConfig | None = None
    # Where the legacy log links go (/var/log/containers; "": none).
    container_logs_dir: str = ""
    # The node's hugepage sizes ("2MB"): each gets a limit in every container.
    hugepage_sizes: tuple[str, ...] = ()
    # The SupplementalGroupsPolicy gate: container statuses carry the user
    # the runtime reports.
    supplemental_groups_policy: bool = True
    # cpuCFSQuota and cpuCFSQuotaPeriod (µs): None, no CFS quota for a cpu limit.
    cfs_period: int | None = DEFAULT_CPU_PERIOD


def container_config(
    node: NodeSettings,
    pod: Pod,
    c: Container,
    restart: int,
    image_ref: str,
    chash: str,
    opts: RunContainerOptions,
    image_uid: int | None = None,
    image_username: str = "",
    userns: pb.UserNamespace | None = None,
) -> pb.ContainerConfig:
    """SecurityContextError when the security context cannot be expressed.
    `userns`: the pod's user namespace as its sandbox was given it; every
    mount carries its mappings so the runtime makes it an idmapped mount."""
    envs = [pb.KeyValue(key=k, value=v) for k, v in opts.envs]
    command, args = expand_command_and_args(c, opts.envs)
    lsc = container_security_context(
        pod,
        c,
        seccomp_root=node.seccomp_root,
        image_uid=image_uid,
        image_username=image_username,
        seccomp_default=node.seccomp_default,
        user_namespaces_support=node.user_namespaces_support,
        userns=userns,
    )
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=c["name"], attempt=restart),
        image=pb.ImageSpec(image=image_ref, user_specified_image=c["image"]),
        command=command,
        args=args,
        working_dir=c.get("workingDir", ""),
        envs=envs,
        mounts=cri_mounts(opts, userns),
        devices=[
            pb.Device(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in opts.devices
        ],
        labels=L.container_labels(pod, c),
        annotations=L.container_annotations(pod, c, restart, chash),
        log_path=f"{filesystem.component(c['name'], 'container name')}/{restart}.log",
        stdin=bool(c.get("stdin")),
        stdin_once=bool(c.get("stdinOnce")),
        tty=bool(c.get("tty")),
        linux=pb.LinuxContainerConfig(
            resources=container_resources(pod, c, node), security_context=lsc
        ),
    )


def cri_mounts(opts: RunContainerOptions, userns: pb.UserNamespace | None) -> list[pb.Mount]:
    """The container's mounts; each carries the pod's ID mappings when it has
    a user namespace, so the runtime makes it an idmapped mount."""
    return [
        pb.Mount(
            container_path=m.container_path,
            host_path=m.host_path,
            readonly=m.read_only,
            selinux_relabel=m.selinux_relabel,
            propagation=_PROPAGATION[m.propagation],
            recursive_read_only=m.recursive_read_only,
            uidMappings=userns.uids if userns is not None else (),
            gidMappings=userns.gids if userns is not None else (),
        )
        for m in opts.mounts
    ]


def sandbox_userns(sandbox_cfg: pb.PodSandboxConfig) -> pb.UserNamespace | None:
    """The user namespace the pod's sandbox was configured with (None: none)."""
    ns = sandbox_cfg.linux.security_context.namespace_options
    return ns.userns_options if ns.HasField("userns_options") else None


def _limit(pod: Pod, c: Container, name: str) -> Quantity | None:
    """The container's limit; when it sets none (or zero) and the pod sets
    pod-level resources, the pod-level limit (getCPULimit/getMemoryLimit)."""
    own = ((c.get("resources") or {}).get("limits") or {}).get(name)
    if (own is None or to_bytes(own) == 0) and is_pod_level_resources_set(pod):
        return ((pod["spec"].get("resources") or {}).get("limits") or {}).get(name)
    return own


def oom_score_adj(pod: Pod, c: Container, node_memory: int) -> int:
    """GetContainerOOMScoreAdjust: Guaranteed -997, BestEffort 1000; Burstable
    from the container's memory request as a share of the node's, with the
    pod-level memory request that no container claims spread evenly over them.
    A sidecar scores no higher than the regular container asking least."""
    qos = qos_class(pod)
    if qos == "Guaranteed":
        return -997
    if qos == "BestEffort":
        return 1000
    if not node_memory:
        return 999
    spare = remaining_pod_memory_per_container(pod) if is_pod_level_requests_set(pod) else 0
    adj = 1000 - (1000 * (container_requests(c).get("memory", 0) + spare)) // node_memory
    regular = pod["spec"].get("containers") or []
    if regular and _is_sidecar(pod, c):
        least = min(container_requests(r).get("memory", 0) for r in regular)
        adj = min(adj, 1000 - (1000 * (least + spare)) // node_memory)
    # Above a Guaranteed container's (1000 - 997) and below a BestEffort one's.
    return int(min(max(adj, 3), 999))


def _is_sidecar(pod: Pod, c: Container) -> bool:
    return c.get("restartPolicy") == "Always" and any(
        i["name"] == c["name"] for i in pod["spec"].get("initContainers") or []
    )


def remaining_pod_memory_per_container(pod: Pod) -> int:
    """The pod-level memory request beyond the containers' aggregate, per container."""
    pod_mem = pod_level_requests(pod).get("memory", 0)
    if not pod_mem:
        return 0
    spec = pod["spec"]
    n = len(spec.get("containers") or []) + len(spec.get("initContainers") or [])
    spare = pod_mem - aggregate_container_requests(pod).get("memory", 0)
    # Go's integer division truncates toward zero.
    return spare // n if spare >= 0 else -(-spare // n)


def container_resources(pod: Pod, c: Container, node: NodeSettings) -> pb.LinuxContainerResources:
    req = container_requests(c)
    out = pb.LinuxContainerResources()
    # cpu shares from the request (min 2), CFS quota from the limit, as upstream.
    out.cpu_shares = milli_cpu_to_shares(req.get("cpu", 0))
    cpu_lim, mem_lim = _limit(pod, c, "cpu"), _limit(pod, c, "memory")
    # A zero limit is no limit (MilliCPUToQuota gives 0, a 0 memory limit is unset).
    if cpu_lim is not None and cpu_millis(cpu_lim) > 0 and node.cfs_period is not None:
        out.cpu_period = node.cfs_period
        out.cpu_quota = milli_cpu_to_quota(cpu_millis(cpu_lim), node.cfs_period)
    if mem_lim is not None and to_bytes(mem_lim) > 0:
        out.memory_limit_in_bytes = to_bytes(mem_lim)
    out.oom_score_adj = oom_score_adj(pod, c, node.node_memory)
    for size, limit in hugepages.container_limits(pod, c, node.hugepage_sizes).items():
        out.hugepage_limits.add(page_size=size, limit=limit)
    if node.swap is not None:
        configure_swap(node.swap, out, pod, c)
    return out
