"""dra_manager_state byte for byte as the Go kubelet writes it (the
checkpoints of upstream's state/checkpointer_test.go), read back, and its
checksum enforced."""

from __future__ import annotations

import pytest

from kubelet.checkpointmanager import CheckpointStore, CorruptCheckpointError
from kubelet.cm.dra.state import CHECKPOINT_NAME, ClaimInfoState, Device, decode, encode
from kubelet.cm.dra.state import load_or_create as load

UID, POD = "067798be-454e-4be4-9047-1aa06aea63f7", "139cdb46-f989-4f17-9561-ca10cfb509a6"
DRV = "test-driver.cdi.k8s.io"
CDI = "example.com/example=cdi-example"
HEAD = (r'{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",'
        r'\"ClaimInfoStateList\":[')  # fmt: skip


def _claim(uid: str, name: str, devices: list[Device]) -> ClaimInfoState:
    return ClaimInfoState(uid, name, "default", {POD}, {DRV: devices})


ONE = (
    HEAD + r"{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\","
    r"\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},"
    r"\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\","
    r"\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],"
    r'\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1656016162}'
)
TWO = (
    HEAD + r"{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\","
    r"\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},"
    r"\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\","
    r"\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],"
    r"\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},"
    r"{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\","
    r"\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},"
    r"\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\","
    r'\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}",'
    r'"Checksum":1582256999}'
)
ONE_CLAIMS = [_claim(UID, "example", [Device("worker-1", "dev-1", ["test request"], [CDI])])]
TWO_CLAIMS = [
    _claim(UID, "example-1", [Device("worker-1", "dev-1", ["test request"], [CDI])]),
    _claim("4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "example-2", [Device("worker-1", "dev-2")]),
]


@pytest.mark.parametrize("text,claims", [(ONE, ONE_CLAIMS), (TWO, TWO_CLAIMS)])
def test_upstreams_checkpoints_byte_for_byte(text: str, claims: list[ClaimInfoState]) -> None:
    assert encode(claims).decode() == text
    assert decode(text.encode()) == claims


def test_an_older_layout_without_request_names_is_read() -> None:
    text = (
        HEAD + r"{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\","
        r"\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},"
        r"\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\","
        r'\"DeviceName\":\"dev-1\",\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}",'
        r'"Checksum":1137250765}'
    )
    assert decode(text.encode()) == [
        _claim(UID, "example", [Device("worker-1", "dev-1", None, [CDI])])
    ]


def test_a_wrong_checksum_or_broken_json_is_refused() -> None:
    with pytest.raises(CorruptCheckpointError, match="checkpoint is corrupted"):
        decode(ONE.replace("1656016162", "1656016163").encode())
    with pytest.raises(Exception, match="invalid JSON"):
        decode(b"{")


def test_a_missing_file_is_created_empty(tmp_path) -> None:
    store = CheckpointStore(str(tmp_path))
    assert load(store) == []
    blob = (tmp_path / CHECKPOINT_NAME).read_bytes()
    assert blob.startswith(HEAD[:-2].encode()) and b'\\"ClaimInfoStateList\\":null}' in blob
    assert decode(blob) == []
