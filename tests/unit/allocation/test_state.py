"""The allocation checkpoints: upstream's file format and checksum."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kubelet.allocation.state import (
    ALLOCATED_FILE,
    AllocationState,
    decode,
    encode,
)
from kubelet.checkpointmanager import CheckpointStore, CorruptCheckpointError

# From upstream's state_checkpoint_test.go (written by the Go kubelet).
GO_FILE = (
    b'{"data":"{\\"entries\\":{\\"pod1\\":{\\"ContainerResources\\":{\\"container1\\":'
    b'{\\"requests\\":{\\"cpu\\":\\"1Ki\\",\\"memory\\":\\"1Ki\\"}}}}}}","checksum":1178570812}'
)


def test_a_file_the_go_kubelet_wrote_is_read_and_written_back_byte_for_byte() -> None:
    entries = decode(GO_FILE)
    assert entries == {"pod1": {"container1": {"requests": {"cpu": "1Ki", "memory": "1Ki"}}}}
    assert encode(entries) == GO_FILE


def test_a_changed_data_string_fails_the_checksum() -> None:
    with pytest.raises(CorruptCheckpointError):
        decode(GO_FILE.replace(b'1Ki\\",\\"memory', b'2Ki\\",\\"memory'))


def test_quantities_are_kept_canonical_and_limits_come_before_requests() -> None:
    data = json.loads(
        encode(
            {
                "u": {
                    "c": {
                        "requests": {"memory": "1048576", "cpu": "0.5"},
                        "limits": {"cpu": "1000m"},
                    }
                }
            }
        )
    )["data"]
    assert data == (
        '{"entries":{"u":{"ContainerResources":{"c":'
        '{"limits":{"cpu":"1"},"requests":{"cpu":"500m","memory":"1048576"}}}}}}'
    )


def test_empty_state_is_an_empty_object() -> None:
    assert json.loads(encode({}))["data"] == "{}"


def test_state_survives_a_restart_and_orphans_go(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    st = AllocationState.restore(store, ALLOCATED_FILE)
    st.set_pod("a", {"c": {"requests": {"cpu": "100m"}}})
    st.set_container("b", "d", {"limits": {"memory": "64Mi"}})
    again = AllocationState.restore(store, ALLOCATED_FILE)
    assert again.get_container("a", "c") == {"requests": {"cpu": "100m"}}
    assert again.get_pod("b") == {"d": {"limits": {"memory": "64Mi"}}}
    again.remove_orphans({"b"})
    assert AllocationState.restore(store, ALLOCATED_FILE).pods() == {"b"}


def test_a_corrupt_file_names_itself_and_stops_the_kubelet(tmp_path: Path) -> None:
    (tmp_path / ALLOCATED_FILE).write_bytes(GO_FILE.replace(b"1178570812", b"1"))
    with pytest.raises(ValueError, match="pod resource information checkpoint file") as err:
        AllocationState.restore(CheckpointStore(str(tmp_path)), ALLOCATED_FILE)
    assert str(tmp_path / ALLOCATED_FILE) in str(err.value)


def test_an_unchanged_state_is_not_written_again(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    st = AllocationState.restore(store, ALLOCATED_FILE)
    st.set_pod("a", {"c": {"requests": {"cpu": "100m"}}})
    path = tmp_path / ALLOCATED_FILE
    path.write_bytes(b"sentinel")  # a write would replace it
    st.set_pod("a", {"c": {"requests": {"cpu": "0.1"}}})
    assert path.read_bytes() == b"sentinel"


class CountingStore(CheckpointStore):
    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.writes = 0

    def write(self, key: str, data: bytes) -> None:
        self.writes += 1
        super().write(key, data)


async def test_on_the_loop_one_pass_of_changes_is_one_write(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path))
    st = AllocationState.restore(store, ALLOCATED_FILE)
    for i in range(50):  # an admission batch: all in one loop pass
        st.set_pod(f"p{i}", {"c": {"requests": {"cpu": f"{i + 1}m"}}})
    st.remove_pod("p7")
    assert store.writes == 0  # queued behind the changes, not yet on disk
    await asyncio.sleep(0)
    assert store.writes == 1
    again = AllocationState.restore(store, ALLOCATED_FILE)
    assert again.pods() == {f"p{i}" for i in range(50)} - {"p7"}
    assert again.get_container("p49", "c") == {"requests": {"cpu": "50m"}}
    st.set_container("p1", "d", {"limits": {"memory": "1Mi"}})
    await asyncio.sleep(0)
    assert store.writes == 2
    assert decode((tmp_path / ALLOCATED_FILE).read_bytes())["p1"]["d"] == {
        "limits": {"memory": "1Mi"}
    }


def test_kept_entries_write_the_same_file_as_encoding_afresh(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    st = AllocationState.restore(store, ALLOCATED_FILE)
    want: dict[str, dict[str, dict[str, dict[str, str]]]] = {}
    for i in range(30):
        u = f"uid-{(i * 7919) % 101:03d}"  # set out of order: the file sorts them
        want.setdefault(u, {})[f"c{i % 3}"] = {"requests": {"memory": f"{i}Mi"}}
        st.set_container(u, f"c{i % 3}", {"requests": {"memory": f"{i}Mi"}})
    st.remove_pod("uid-000")
    want.pop("uid-000", None)
    assert (tmp_path / ALLOCATED_FILE).read_bytes() == encode(want)  # type: ignore[arg-type]
