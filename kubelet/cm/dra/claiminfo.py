"""The claim info cache (claimInfoCache of cm/dra upstream): what this node
knows of the ResourceClaims its pods use, keyed by claim namespace/name, with
the pods using each claim and the devices each driver prepared for it.

It is its own object, built before the DRA manager and the health handler, so
both can hold it from construction: the manager changes it, the health
handler reads which pods hold a device. It is checkpointed as upstream's
dra_manager_state after every change. Restored entries are not marked
prepared, so the next sync of a pod calls NodePrepareResources again (drivers
must be idempotent, as upstream expects).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

from kubelet.apis.podresources.types import ClaimDevice
from kubelet.checkpointmanager import CheckpointError, CheckpointStore
from kubelet.cm.dra import claims as cl
from kubelet.cm.dra import metrics as dm
from kubelet.cm.dra import state as st
from kubelet.types import Container, Pod, namespace


@dataclass
class ClaimInfo:
    state: st.ClaimInfoState
    prepared: bool = False


@dataclass(frozen=True)
class ContainerClaim:
    """A claim a container names, with all the devices prepared for it."""

    reference: str  # the container's resources.claims[].name
    request: str  # that entry's request ("" for the whole claim)
    devices: tuple[ClaimDevice, ...]


def claim_devices(s: st.ClaimInfoState) -> tuple[ClaimDevice, ...]:
    """Drivers in name order, each driver's devices in its answer's order."""
    return tuple(
        ClaimDevice(driver, d.pool_name, d.device_name, tuple(d.cdi_device_ids or ()))
        for driver in sorted(s.driver_state)
        for d in s.driver_state[driver] or []
    )


def key(ns: str, name: str) -> str:
    return f"{ns}/{name}"


class ClaimInfoCache:
    def __init__(self, state_dir: str) -> None:
        """ValueError (the kubelet refuses to start) for a corrupt checkpoint."""
        self.store = CheckpointStore(state_dir)
        try:
            restored = st.load_or_create(self.store)
        except (CheckpointError, OSError) as err:
            raise ValueError(
                f"create ResourceClaim cache: {err}, please drain this node and delete "
                f"the DRA state file {self.store.directory}/{st.CHECKPOINT_NAME}"
            ) from None
        self.entries = {key(s.namespace, s.claim_name): ClaimInfo(s) for s in restored}
        # (driver, pool, device) -> UIDs of the pods whose claims hold it
        self._users: dict[tuple[str, str, str], set[str]] = {}
        # UIDs of the pods some claim still counts
        self._pods: frozenset[str] = frozenset()
        self._reindex()
        # What the file holds: a step that changed no claim writes nothing.
        self._written = self._encoded()

    def get(self, ns: str, name: str) -> ClaimInfo | None:
        return self.entries.get(key(ns, name))

    def add(self, state: st.ClaimInfoState) -> ClaimInfo:
        info = self.entries[key(state.namespace, state.claim_name)] = ClaimInfo(state)
        return info

    def remove(self, ns: str, name: str) -> None:
        self.entries.pop(key(ns, name), None)

    def __iter__(self) -> Iterator[ClaimInfo]:
        return iter(self.entries.values())

    def container_claim_devices(self, pod: Pod, c: Container) -> list[ContainerClaim]:
        """For the container's allocatedResourcesStatus: each pod claim it
        names that this node knows, once, with the request of its first entry
        and all the claim's devices (as upstream, not only the request's)."""
        try:
            refs = cl.container_claim_refs(pod, c)
        except cl.ClaimError:
            return []
        out: list[ContainerClaim] = []
        seen: set[str] = set()
        for ref, request, claim in refs:
            if ref in seen:
                continue
            seen.add(ref)
            info = self.get(namespace(pod), claim)
            if info is not None:
                out.append(ContainerClaim(ref, request, claim_devices(info.state)))
        return out

    def pods_using(self, driver: str, pool: str, device: str) -> Collection[str]:
        """The pods whose claims on this node hold the device (from an index
        kept with the checkpoint, not a walk over the claims)."""
        return self._users.get((driver, pool, device), set())

    def holds_pod(self, pod_uid: str) -> bool:
        """PodMightNeedToUnprepareResources: a claim still counts the pod (as of
        the last step on the claims)."""
        return pod_uid in self._pods

    def _reindex(self) -> None:
        users: dict[tuple[str, str, str], set[str]] = {}
        pods: set[str] = set()
        for info in self.entries.values():
            s = info.state
            pods |= s.pod_uids
            for driver, devices in s.driver_state.items():
                for d in devices or []:
                    users.setdefault((driver, d.pool_name, d.device_name), set()).update(s.pod_uids)
        self._users, self._pods = users, frozenset(pods)

    def _encoded(self) -> bytes:
        return st.encode([i.state for _, i in sorted(self.entries.items())])

    def checkpoint(self) -> None:
        """After each step on the claims: their file (only when it changed: two
        fsynced writes per pod were start-up's hot spot), the device index, the
        metric."""
        self._reindex()
        blob = self._encoded()
        if blob != self._written:
            self.store.write(st.CHECKPOINT_NAME, blob)
            self._written = blob
        in_use = [i.state for i in self.entries.values() if i.prepared]
        counts = {dm.ANY_DRIVER: len(in_use)}
        for s in in_use:
            for driver in s.driver_state:
                counts[driver] = counts.get(driver, 0) + 1
        dm.set_claims_in_use(counts)
