"""The CPU manager's state and its checkpoint file `cpu_manager_state`
(pkg/kubelet/cm/cpumanager/state).

The state is the shared pool (defaultCpuSet) and the exclusive CPU sets per
pod UID and container name. Every change is written through to the file in
upstream's v2 JSON format with upstream's checksum, so the Go kubelet and this
one can take over each other's node. v1 files (entries keyed by container ID)
are read and migrated as upstream does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kubelet.checkpointmanager import (
    CheckpointError,
    CheckpointStore,
    CorruptCheckpointError,
    check_policy,
    clean_string,
    go_map,
    go_object,
    go_string,
    go_uint,
    load_json,
    restore_checkpoint,
    struct_fields,
)
from kubelet.checkpointmanager.checksum import GoMap, GoPtr, GoScalar, GoStruct, GoValue, checksum
from kubelet.cm.containermap import ContainerMap
from kubelet.util import cpuset
from kubelet.util.cpuset import EMPTY, CPUSet

log = logging.getLogger(__name__)

STATE_FILE = "cpu_manager_state"
_FIELDS = ("policyName", "defaultCpuSet", "entries", "checksum")

# pod UID -> container name -> CPU set (as text in the checkpoint)
Entries = dict[str, dict[str, str] | None]


@dataclass
class Checkpoint:
    """CPUManagerCheckpoint (v2): what the file holds, as Go decodes it."""

    policy_name: str = ""
    default_cpuset: str = ""
    # None stands for a JSON null (a nil map), which hashes differently from {}.
    entries: Entries | None = field(default_factory=dict)
    checksum: int = 0


def _str_map(items: dict[str, str] | None) -> GoMap:
    pairs = None if items is None else tuple(
        (GoScalar("string", k), GoScalar("string", v)) for k, v in items.items()
    )  # fmt: skip
    return GoMap("map[string]string", pairs)


def go_value(cp: Checkpoint, v1_entries: dict[str, str] | None = None, v1: bool = False) -> GoValue:
    """The checkpoint as the Go struct spew prints (v1: the CPUManagerCheckpointV1 layout)."""
    entries: GoValue
    if v1:
        entries = _str_map(v1_entries)
    else:
        pairs = None if cp.entries is None else tuple(
            (GoScalar("string", pod), _str_map(c)) for pod, c in cp.entries.items()
        )  # fmt: skip
        entries = GoMap("map[string]map[string]string", pairs)
    # V1 is hashed under V2's type name (upstream replaces "CPUManagerCheckpointV1").
    return GoPtr(
        "state.CPUManagerCheckpoint",
        GoStruct(
            "state.CPUManagerCheckpoint",
            (
                ("PolicyName", GoScalar("string", cp.policy_name)),
                ("DefaultCPUSet", GoScalar("string", cp.default_cpuset)),
                ("Entries", entries),
                ("Checksum", GoScalar("checksum.Checksum", 0)),
            ),
        ),
    )


def encode(cp: Checkpoint) -> bytes:
    """MarshalCheckpoint: the checksum of the struct, then Go's JSON of it."""
    cp.checksum = checksum(go_value(cp))
    parts = [
        ("policyName", go_string(cp.policy_name)),
        ("defaultCpuSet", go_string(cp.default_cpuset)),
    ]
    if cp.entries:  # omitempty
        parts.append(
            (
                "entries",
                go_map(
                    {
                        pod: go_map(None if c is None else {k: go_string(v) for k, v in c.items()})
                        for pod, c in cp.entries.items()
                    }
                ),
            )
        )
    parts.append(("checksum", str(cp.checksum)))
    return go_object(parts).encode()


def _decode_str_map(v: object, where: str) -> dict[str, str] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise CheckpointError(f"{where}: want an object")
    return {clean_string(k, where): clean_string(x, f"{where}[{k}]") for k, x in v.items()}


def _decode(blob: bytes, v1: bool) -> tuple[Checkpoint, dict[str, str] | None]:
    raw = struct_fields(load_json(blob), _FIELDS, "checkpoint")
    cp = Checkpoint()
    v1_entries: dict[str, str] | None = {}
    if raw.get("policyName") is not None:
        cp.policy_name = clean_string(raw["policyName"], "policyName")
    if raw.get("defaultCpuSet") is not None:
        cp.default_cpuset = clean_string(raw["defaultCpuSet"], "defaultCpuSet")
    if raw.get("checksum") is not None:
        cp.checksum = go_uint(raw["checksum"], "checksum")
    if "entries" in raw:
        e = raw["entries"]
        if v1:
            v1_entries = _decode_str_map(e, "entries")
        elif e is None:
            cp.entries = None
        elif not isinstance(e, dict):
            raise CheckpointError("entries: want an object")
        else:
            cp.entries = {clean_string(p, "entries"): _decode_str_map(c, p) for p, c in e.items()}
    want = cp.checksum
    if want:  # 0: an old file without a checksum, accepted as upstream
        got = checksum(go_value(cp, v1_entries, v1=v1))
        if got != want:
            raise CorruptCheckpointError(got, want)
    return cp, v1_entries


def decode(blob: bytes, containers: ContainerMap) -> Checkpoint:
    """Read a v1 or v2 checkpoint as restoreState does; CheckpointError if unusable."""
    try:
        cp, v1_entries = _decode(blob, v1=True)
    except CheckpointError:
        cp, _ = _decode(blob, v1=False)
        return cp
    migrated: dict[str, dict[str, str] | None] = {}
    for cid, cpus in (v1_entries or {}).items():
        ref = containers.get_container_ref(cid)
        if ref is None:
            raise CheckpointError(
                "error migrating v1 checkpoint state to v2 checkpoint state: "
                f"containerID '{cid}' not found in initial containers list"
            )
        per_pod = migrated.setdefault(ref[0], {})
        assert per_pod is not None
        per_pod[ref[1]] = cpus
    return Checkpoint(cp.policy_name, cp.default_cpuset, migrated, cp.checksum)


class CPUManagerState:
    """The state, written through to the checkpoint file when there is one."""

    def __init__(self, policy_name: str, store: CheckpointStore | None = None) -> None:
        self.policy_name = policy_name
        self.store = store
        self._default: CPUSet = EMPTY
        self._assignments: dict[str, dict[str, CPUSet]] = {}

    @classmethod
    def restore(
        cls, store: CheckpointStore, policy_name: str, containers: ContainerMap
    ) -> CPUManagerState:
        """NewCheckpointState: read the file (creating it when absent). ValueError
        with upstream's message when it is corrupt or from another policy."""
        st = cls(policy_name, store)

        def load(blob: bytes) -> None:
            cp = decode(blob, containers)
            check_policy(policy_name, cp.policy_name)
            st._load(cp)

        if not restore_checkpoint(store, STATE_FILE, "CPU manager", load):
            st._store()
        return st

    def _load(self, cp: Checkpoint) -> None:
        try:
            self._default = cpuset.parse(cp.default_cpuset)
        except ValueError as err:
            raise CheckpointError(
                f'could not parse default cpu set "{cp.default_cpuset}": {err}'
            ) from None
        assignments: dict[str, dict[str, CPUSet]] = {}
        for pod, containers in (cp.entries or {}).items():
            per_pod = assignments.setdefault(pod, {})
            for name, text in (containers or {}).items():
                try:
                    per_pod[name] = cpuset.parse(text)
                except ValueError as err:
                    raise CheckpointError(
                        f'could not parse cpuset "{text}" for container "{name}" in pod '
                        f'"{pod}": {err}'
                    ) from None
        self._assignments = assignments

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(
            self.policy_name,
            cpuset.format_cpus(self._default),
            {
                pod: {name: cpuset.format_cpus(c) for name, c in containers.items()}
                for pod, containers in self._assignments.items()
            },
        )

    def _store(self) -> None:
        if self.store is None:
            return
        try:
            self.store.write(STATE_FILE, encode(self.checkpoint()))
        except OSError as err:  # as upstream: logged, the in-memory state stands
            log.error("Failed to store the CPU manager checkpoint: %s", err)

    # ---------------------------------------------------------------- reads
    def get_cpuset(self, pod_uid: str, container: str) -> CPUSet | None:
        return self._assignments.get(pod_uid, {}).get(container)

    def get_default_cpuset(self) -> CPUSet:
        return self._default

    def get_cpuset_or_default(self, pod_uid: str, container: str) -> CPUSet:
        found = self.get_cpuset(pod_uid, container)
        return self._default if found is None else found

    def get_assignments(self) -> dict[str, dict[str, CPUSet]]:
        return {pod: dict(c) for pod, c in self._assignments.items()}

    # --------------------------------------------------------------- writes
    def set_cpuset(self, pod_uid: str, container: str, cpus: CPUSet) -> None:
        self._assignments.setdefault(pod_uid, {})[container] = cpus
        self._store()

    def set_default_cpuset(self, cpus: CPUSet) -> None:
        self._default = cpus
        self._store()

    def delete(self, pod_uid: str, container: str) -> None:
        per_pod = self._assignments.get(pod_uid)
        if per_pod is not None:
            per_pod.pop(container, None)
            if not per_pod:
                del self._assignments[pod_uid]
        self._store()
