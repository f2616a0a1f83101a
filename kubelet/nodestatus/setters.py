"""Build the Node object and its status (pkg/kubelet/nodestatus/setters.go).

Each setter fills one part of Node.status from what the kubelet knows; the
node status manager runs them every nodeStatusUpdateFrequency.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import cast

from kubelet.apis.config import KubeletConfiguration
from kubelet.core_v1 import NodeFeatures
from kubelet.nodestatus.machine import MachineInfo
from kubelet.types import (
    ContainerImage,
    Node,
    NodeAddress,
    NodeCondition,
    NodeRuntimeHandler,
    NodeStatus,
    NodeSystemInfo,
    Taint,
)
from kubelet.util.gotime import meta_now
from kubelet.util.quantity import parse_quantity
from kubelet.util.validation import is_extended_resource_name

MiB = 1024 * 1024


def format_bytes(n: int) -> str:
    """Binary-SI quantity as the API server canonicalises it (e.g. 16318404Ki)."""
    if n % (1024**3) == 0 and n:
        return f"{n // 1024**3}Gi"
    if n % MiB == 0 and n:
        return f"{n // MiB}Mi"
    if n % 1024 == 0:
        return f"{n // 1024}Ki"
    return str(n)


def format_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


# (capacity, allocatable, removed) as devicemanager.Capacity gives them.
DeviceResources = tuple[Mapping[str, int], Mapping[str, int], Sequence[str]]


@dataclass
class NodeInputs:
    """What the setters read. Callables are read at every status computation."""

    name: str
    config: KubeletConfiguration
    machine: MachineInfo
    kubelet_version: str
    # Empty while DisableNodeKubeProxyVersion is on (its default), as upstream.
    kube_proxy_version: str = ""
    node_ips: list[str] = field(default_factory=list)
    node_labels: dict[str, str] = field(default_factory=dict)
    hostname: str = ""
    runtime_version: Callable[[], str] = lambda: ""  # e.g. "containerd://1.6.20"
    # The runtime's handlers and their features (name, features.userNamespaces, ...).
    runtime_handlers: Callable[[], list[NodeRuntimeHandler]] = lambda: []
    # NodeFeatures: the runtime's features, None while the gate
    # (SupplementalGroupsPolicy) is off or the runtime reports none.
    runtime_features: Callable[[], NodeFeatures | None] = lambda: None
    # Each returns None when healthy, else the reason the node is not ready.
    readiness_checks: list[Callable[[], str | None]] = field(default_factory=list)
    images: Callable[[], list[ContainerImage]] = lambda: []
    rootfs_capacity: Callable[[], int] = lambda: 0
    memory_pressure: Callable[[], bool] = lambda: False
    disk_pressure: Callable[[], bool] = lambda: False
    pid_pressure: Callable[[], bool] = lambda: False
    # Volumes attached or mounted here (kubernetes.io/csi/<driver>^<handle>):
    # the attach-detach controller never detaches one while it is listed.
    volumes_in_use: Callable[[], list[str]] = lambda: []
    # Told the volumes in use of each status written ("reported in use").
    volumes_reported: Callable[[list[str]], None] = lambda names: None
    # Returns when the status should be written before the next period (a
    # volume to attach waits to be reported in use); None: only on the period.
    urgent: Callable[[], Awaitable[None]] | None = None
    # Device plugin resources (the device manager's GetCapacity): capacity and
    # allocatable counts, and resources whose plugin is gone (reported as 0).
    device_resources: Callable[[], DeviceResources] = lambda: ({}, {}, [])


def default_node_ip() -> str:
    """The address the host would use to reach the outside (no traffic is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET: connect() on UDP only picks a route
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def initial_node(inp: NodeInputs) -> Node:
    """The Node object registered at start (initialNode)."""
    node = node_identity(inp)
    node["status"] = compute_status(inp, None)
    return node


def node_identity(inp: NodeInputs) -> Node:
    """initialNode's metadata and spec: the well-known labels and --node-labels,
    registerWithTaints, providerID."""
    labels = {
        "kubernetes.io/hostname": inp.hostname or inp.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": inp.machine.architecture,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": inp.machine.architecture,
    }
    labels.update(inp.node_labels)
    node: Node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": inp.name,
            "labels": labels,
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
    }
    if inp.config.register_with_taints:
        # Validated with the configuration: key and effect are there.
        node["spec"]["taints"] = [cast(Taint, dict(t)) for t in inp.config.register_with_taints]
    if inp.config.provider_id:
        node["spec"]["providerID"] = inp.config.provider_id
    return node


def max_pods(config: KubeletConfiguration, num_cores: int) -> int:
    """The node's pod capacity: maxPods, lowered to podsPerCore times the cores
    when podsPerCore is set."""
    if config.pods_per_core > 0:
        return min(num_cores * config.pods_per_core, config.max_pods)
    return config.max_pods


def capacity(inp: NodeInputs) -> dict[str, str]:
    cap = {
        "cpu": str(inp.machine.num_cores),
        "memory": format_bytes(inp.machine.memory_capacity),
        "pods": str(max_pods(inp.config, inp.machine.num_cores)),
    }
    # localStorageCapacityIsolation: false leaves local storage out of the
    # node's resources altogether, as upstream.
    rootfs = inp.rootfs_capacity() if inp.config.local_storage_capacity_isolation else 0
    if rootfs:
        cap["ephemeral-storage"] = format_bytes(rootfs)
    for name, size in inp.machine.hugepages.items():
        cap[name] = format_bytes(size)
    devices, _, removed = inp.device_resources()
    cap.update({r: "0" for r in removed})
    cap.update({r: str(n) for r, n in devices.items()})
    return cap


def allocatable(inp: NodeInputs, cap: dict[str, str]) -> dict[str, str]:
    """Capacity minus kube-reserved, system-reserved and the hard eviction threshold."""
    cfg = inp.config
    out = dict(cap)

    def reserved(resource: str) -> Decimal:
        total = Decimal(0)
        for m in (cfg.kube_reserved, cfg.system_reserved):
            if resource in m:
                total += parse_quantity(m[resource])
        return total

    cpu_m = int(parse_quantity(cap["cpu"]) * 1000 - reserved("cpu") * 1000)
    out["cpu"] = format_cpu(max(0, cpu_m))
    mem = Decimal(inp.machine.memory_capacity) - reserved("memory")
    mem -= _eviction(cfg.eviction_hard.get("memory.available"), inp.machine.memory_capacity)
    # Hugepages are carved out of memory.
    mem -= sum(Decimal(v) for v in inp.machine.hugepages.values())
    out["memory"] = format_bytes(max(0, int(mem)))
    if "ephemeral-storage" in cap:
        disk = Decimal(inp.rootfs_capacity()) - reserved("ephemeral-storage")
        disk -= _eviction(cfg.eviction_hard.get("nodefs.available"), inp.rootfs_capacity())
        out["ephemeral-storage"] = str(max(0, int(disk)))
    for name, size in inp.machine.hugepages.items():
        out[name] = format_bytes(max(0, int(Decimal(size) - reserved(name))))
    # Device plugin resources: the healthy devices, nothing reserved.
    _, devices, removed = inp.device_resources()
    out.update({r: "0" for r in removed})
    out.update({r: str(n) for r, n in devices.items()})
    return out


def _eviction(threshold: str | None, capacity_bytes: int) -> Decimal:
    if not threshold:
        return Decimal(0)
    if threshold.endswith("%"):
        return Decimal(capacity_bytes) * Decimal(threshold[:-1]) / 100
    return parse_quantity(threshold)


_CONDITIONS = (
    # type, true when, reason-if-true, message-if-true, reason-if-false, message-if-false
    ("MemoryPressure", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
     "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasDiskPressure", "kubelet has disk pressure",
     "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasInsufficientPID", "kubelet has insufficient PID available",
     "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)  # fmt: skip


def _conditions(inp: NodeInputs, old: NodeStatus | None, now: str) -> list[NodeCondition]:
    """The pressure conditions and Ready; a condition keeps its transition time
    from `old` while its status is the same."""
    prev = {c["type"]: c for c in (old or {}).get("conditions", [])}

    def cond(ctype: str, status: str, reason: str, message: str) -> NodeCondition:
        before = prev.get(ctype)
        same = before is not None and before.get("status") == status
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": before["lastTransitionTime"] if same and before else now,
            "reason": reason,
            "message": message,
        }

    pressures = (inp.memory_pressure, inp.disk_pressure, inp.pid_pressure)
    conditions = []
    for (ctype, r_true, m_true, r_false, m_false), pressure in zip(
        _CONDITIONS, pressures, strict=True
    ):
        if pressure():
            conditions.append(cond(ctype, "True", r_true, m_true))
        else:
            conditions.append(cond(ctype, "False", r_false, m_false))
    problems = [p for p in (check() for check in inp.readiness_checks) if p]
    if problems:
        conditions.append(cond("Ready", "False", "KubeletNotReady", ", ".join(problems)))
    else:
        conditions.append(cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"))
    return conditions


def _node_info(inp: NodeInputs) -> NodeSystemInfo:
    m = inp.machine
    node_info: NodeSystemInfo = {
        "machineID": m.machine_id,
        "systemUUID": m.system_uuid,
        "bootID": m.boot_id,
        "kernelVersion": m.kernel_version,
        "osImage": m.os_image,
        "containerRuntimeVersion": inp.runtime_version(),
        "kubeletVersion": inp.kubelet_version,
        "kubeProxyVersion": inp.kube_proxy_version,
        "operatingSystem": "linux",
        "architecture": m.architecture,
    }
    if m.swap_capacity:  # NodeSwap (GA): the node's swap, when it has any
        node_info["swap"] = {"capacity": m.swap_capacity}
    return node_info


def compute_status(inp: NodeInputs, old: NodeStatus | None) -> NodeStatus:
    """Node.status from the inputs; transition times carry over from `old` when unchanged."""
    conditions = _conditions(inp, old, meta_now())
    cap = capacity(inp)
    # Extended resources someone else put in the Node's capacity (an admin's
    # PATCH advertising a dongle) stay, and become allocatable, as upstream.
    for name, quantity in ((old or {}).get("capacity") or {}).items():
        if name not in cap and is_extended_resource_name(name):
            cap[name] = str(quantity)
    addresses: list[NodeAddress] = [{"type": "InternalIP", "address": ip} for ip in inp.node_ips]
    addresses.append({"type": "Hostname", "address": inp.hostname or inp.name})
    out: NodeStatus = {
        "capacity": {**cap},
        "allocatable": {**allocatable(inp, cap)},
        "conditions": conditions,
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": inp.config.port}},
        "nodeInfo": _node_info(inp),
        "images": inp.images()[: max(0, inp.config.node_status_max_images)]
        if inp.config.node_status_max_images >= 0
        else inp.images(),
        # Always sent (an empty list too): a merge patch leaves out fields alone.
        "volumesInUse": sorted(inp.volumes_in_use()),
    }
    # RecursiveReadOnlyMounts is GA, so upstream always sets them; none (an old
    # runtime, or no status answer yet) is left out as its omitempty does.
    handlers = inp.runtime_handlers()
    if handlers:
        out["runtimeHandlers"] = handlers
    features = inp.runtime_features()
    if features is not None:
        out["features"] = features
    return out


def status_changed(old: NodeStatus, new: NodeStatus) -> bool:
    """Whether anything but heartbeat times differs (nodeStatusHasChanged)."""

    def strip(status: NodeStatus) -> dict[str, object]:
        s: dict[str, object] = dict(status)
        s["conditions"] = sorted(
            (
                {k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                for c in status.get("conditions", [])
            ),
            key=lambda c: str(c.get("type", "")),
        )
        return s

    return strip(old) != strip(new)


def rootfs_capacity(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_blocks * st.f_frsize
