"""The CRI config of one container (generateContainerConfig in
kuberuntime_container.go, generateLinuxContainerConfig and
calculateLinuxResources in kuberuntime_container_linux.go)."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet.container.expansion import expand_command_and_args
from kubelet.container.runtime import RunContainerOptions
from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.security_context import container_security_context
from kubelet.kuberuntime.swap import SwapConfig
from kubelet.kuberuntime.swap import configure as configure_swap
from kubelet.types import Container, Pod, qos_class
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
    mounts = [
        pb.Mount(
            container_path=m.container_path,
            host_path=m.host_path,
            readonly=m.read_only,
            selinux_relabel=m.selinux_relabel,
            propagation=_PROPAGATION[m.propagation],
            uidMappings=userns.uids if userns is not None else (),
            gidMappings=userns.gids if userns is not None else (),
        )
        for m in opts.mounts
    ]
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
        mounts=mounts,
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


def sandbox_userns(sandbox_cfg: pb.PodSandboxConfig) -> pb.UserNamespace | None:
    """The user namespace the pod's sandbox was configured with (None: none)."""
    ns = sandbox_cfg.linux.security_context.namespace_options
    return ns.userns_options if ns.HasField("userns_options") else None


def container_resources(pod: Pod, c: Container, node: NodeSettings) -> pb.LinuxContainerResources:
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
        adj = 1000 - (1000 * mem_req) // node.node_memory if node.node_memory else 999
        out.oom_score_adj = int(min(max(adj, 2), 999))
    if node.swap is not None:
        configure_swap(node.swap, out, pod, c)
    return out
