"""The devices each container holds (devicemanager/pod_devices.go), and what
they add to its CRI config.

Devices are picked at admission (so a second pod can never be admitted onto
the same devices) and the plugin's Allocate answer is kept with them once the
container is first created; a restarted container reuses both, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.topologymanager.topology_manager import AdmissionError, init_and_app_containers
from kubelet.cri.api import api_pb2 as cri
from kubelet.types import Container, Pod, uid


class AllocationError(AdmissionError):
    """Devices cannot be given to a container (the message says why); at
    admission an UnexpectedAdmissionError, as upstream's Allocate errors."""


@dataclass
class Allocation:
    """One container's devices of one resource."""

    ids: list[str]
    # NUMA node -> device IDs (-1: a device without topology), for the checkpoint.
    numa: dict[int, list[str]] = field(default_factory=dict)
    response: pb.ContainerAllocateResponse | None = None  # Allocate's answer, once asked


# pod UID -> container name -> resource -> allocation
PodMap = dict[str, dict[str, dict[str, Allocation]]]


class PodDevices:
    """The allocations, and an index of who holds each device: a device's
    health change reaches its pods, and a resource's devices in use are
    known, without a walk over every pod. Allocations change only through
    insert, set_ids and delete, which keep the index."""

    def __init__(self) -> None:
        self.pods: PodMap = {}
        # resource -> device ID -> the (pod UID, container) pairs holding it
        self._holders: dict[str, dict[str, set[tuple[str, str]]]] = {}

    def get(self, pod_uid: str, container: str, resource: str) -> Allocation | None:
        return self.pods.get(pod_uid, {}).get(container, {}).get(resource)

    def container(self, pod_uid: str, container: str) -> dict[str, Allocation]:
        return self.pods.get(pod_uid, {}).get(container, {})

    def insert(self, pod_uid: str, container: str, resource: str, alloc: Allocation) -> None:
        old = self.get(pod_uid, container, resource)
        if old is not None:
            self._unindex(pod_uid, container, resource, old.ids)
        self.pods.setdefault(pod_uid, {}).setdefault(container, {})[resource] = alloc
        self._index(pod_uid, container, resource, alloc.ids)

    def set_ids(self, pod_uid: str, container: str, resource: str, alloc: Allocation,
                fresh: Allocation) -> None:  # fmt: skip
        """Another pick of devices for alloc (the plugin's preference); indexed
        only if alloc is still the container's (the pod may have gone meanwhile)."""
        current = self.get(pod_uid, container, resource) is alloc
        if current:
            self._unindex(pod_uid, container, resource, alloc.ids)
        alloc.ids, alloc.numa = fresh.ids, fresh.numa
        if current:
            self._index(pod_uid, container, resource, alloc.ids)

    def delete(self, pod_uid: str) -> bool:
        containers = self.pods.pop(pod_uid, None)
        for name, resources in (containers or {}).items():
            for resource, alloc in resources.items():
                self._unindex(pod_uid, name, resource, alloc.ids)
        return containers is not None

    def _index(self, pod_uid: str, container: str, resource: str, ids: list[str]) -> None:
        devices = self._holders.setdefault(resource, {})
        for d in ids:
            devices.setdefault(d, set()).add((pod_uid, container))

    def _unindex(self, pod_uid: str, container: str, resource: str, ids: list[str]) -> None:
        devices = self._holders.get(resource, {})
        for d in ids:
            holders = devices.get(d)
            if holders is None:
                continue
            holders.discard((pod_uid, container))
            if not holders:
                del devices[d]
        if not devices:
            self._holders.pop(resource, None)

    def held(self, resource: str) -> list[str]:
        """The devices of resource some container holds."""
        return list(self._holders.get(resource, {}))

    def holders(self, resource: str, device_id: str) -> set[str]:
        """The pods holding the device."""
        return {pod_uid for pod_uid, _ in self._holders.get(resource, {}).get(device_id, ())}

    def pod_ids(self, pod_uid: str, resource: str) -> set[str]:
        """Devices of resource held by any container of the pod."""
        out: set[str] = set()
        for resources in self.pods.get(pod_uid, {}).values():
            if (alloc := resources.get(resource)) is not None:
                out.update(alloc.ids)
        return out

    def reusable(self, pod: Pod, c: Container) -> dict[str, set[str]]:
        """devicesToReuse, derived from what the containers before c hold: a
        regular init container's devices are free for those after it until a
        sidecar or an app container takes them."""
        pool: dict[str, set[str]] = {}
        inits = [i.get("name") for i in pod["spec"].get("initContainers") or []]
        for prev in init_and_app_containers(pod):
            if prev.get("name") == c.get("name"):
                break
            regular_init = prev.get("name") in inits and prev.get("restartPolicy") != "Always"
            for resource, alloc in self.container(uid(pod), prev["name"]).items():
                ids = pool.setdefault(resource, set())
                if regular_init:
                    ids.update(alloc.ids)
                else:
                    ids.difference_update(alloc.ids)
        return pool

    def in_use(self, resource: str, skip: set[tuple[str, str]] | None = None) -> set[str]:
        """Devices of resource held by any container except the (pod, container) pairs in skip."""
        devices = self._holders.get(resource, {})
        if not skip:
            return set(devices)
        return {d for d, holders in devices.items() if holders - skip}


@dataclass
class DeviceRunOptions:
    """What a container's devices add to its CRI config (DeviceRunContainerOptions)."""

    envs: list[cri.KeyValue] = field(default_factory=list)
    mounts: list[cri.Mount] = field(default_factory=list)
    devices: list[cri.Device] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[cri.CDIDevice] = field(default_factory=list)

    def apply(self, cfg: cri.ContainerConfig) -> None:
        """Devices' envs and mounts go before the container's own (which win
        on a clash, as upstream appends the container's after them)."""
        envs = [*self.envs, *cfg.envs]
        del cfg.envs[:]
        cfg.envs.extend(envs)
        mounts = [*self.mounts, *cfg.mounts]
        del cfg.mounts[:]
        cfg.mounts.extend(mounts)
        cfg.devices.extend(self.devices)
        for k, v in self.annotations.items():
            cfg.annotations.setdefault(k, v)
        cfg.CDI_devices.extend(self.cdi_devices)


def run_options(allocations: dict[str, Allocation]) -> DeviceRunOptions:
    """deviceRunContainerOptions: the responses of a container's resources merged;
    a path or name two plugins both give is used once (the first, by resource)."""
    out = DeviceRunOptions()
    envs: dict[str, str] = {}
    mounts: dict[str, cri.Mount] = {}
    devices: dict[str, cri.Device] = {}
    cdi: dict[str, cri.CDIDevice] = {}
    for resource in sorted(allocations):
        resp = allocations[resource].response
        if resp is None:
            continue
        for k, v in sorted(resp.envs.items()):
            envs.setdefault(k, v)
        for k, v in sorted(resp.annotations.items()):
            out.annotations.setdefault(k, v)
        for m in resp.mounts:
            mounts.setdefault(m.container_path, cri.Mount(
                container_path=m.container_path, host_path=m.host_path, readonly=m.read_only
            ))  # fmt: skip
        for d in resp.devices:
            devices.setdefault(d.container_path, cri.Device(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            ))  # fmt: skip
        for c in resp.cdi_devices:
            cdi.setdefault(c.name, cri.CDIDevice(name=c.name))
    out.envs = [cri.KeyValue(key=k, value=v) for k, v in envs.items()]
    out.mounts, out.devices = list(mounts.values()), list(devices.values())
    out.cdi_devices = list(cdi.values())
    return out
