"""kubelet_internal_checkpoint against upstream's own bytes: vectors written by
the pinned module's checkpoint code (hack/resmgr-vectors/gen.sh) are read (the
checksum verifies) and written back byte for byte; a corrupted file is refused
and an allocation survives a restart of the manager."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from kubelet.checkpointmanager import CheckpointError
from kubelet.checkpointmanager.checksum import spew_for_hash
from kubelet.cm.devicemanager import CHECKPOINT_NAME, HEALTHY
from kubelet.cm.devicemanager.api import api_pb2 as pb
from kubelet.cm.devicemanager.checkpoint import go_value, marshal, unmarshal
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.cm.interfaces import RunningContainer
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.wait import wait_for_async
from kubelet.types import Pod
from kubelet.util.clock import FakeClock
from tests.unit.cm.fixtures import R, counts, gpu_pod, held

VECTORS = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "resmgr" / "device_checkpoint.json").read_text()
)


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_upstream_vectors_read_and_written_back(vec: dict) -> None:
    cp = unmarshal(vec["json"].encode())
    assert cp.checksum == vec["checksum"]
    assert spew_for_hash(go_value(cp)) == vec["spew"]
    assert marshal(cp).decode() == vec["json"]


def test_a_changed_file_is_refused() -> None:
    vec = next(v for v in VECTORS["vectors"] if v["name"] == "one")
    with pytest.raises(CheckpointError, match="corrupted"):
        unmarshal(vec["json"].replace('"app"', '"app2"').encode())


async def test_allocations_survive_a_restart() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    clock = FakeClock()
    pod = gpu_pod("p", 1)
    c = pod["spec"]["containers"][0]
    try:
        mgr = DeviceManager(root, clock=clock)
        await mgr.start()
        plugin = FakeDevicePlugin({"a": HEALTHY, "b": HEALTHY})
        await plugin.register(mgr.socket_dir, "p.sock", R)
        await wait_for_async(
            "counts(mgr) == (2, 2)", lambda: counts(mgr) == (2, 2), 20, every=0.01, retry_on=()
        )
        assert mgr.admit(pod) is None
        await mgr.container_options(pod, c)
        await mgr.stop()
        await plugin.stop()
        cp = unmarshal((Path(mgr.socket_dir) / CHECKPOINT_NAME).read_bytes())
        assert cp.registered == {R: ["a", "b"]}
        assert [(e.pod_uid, e.container, e.device_ids) for e in cp.entries or []] == [
            ("uid-p", "c0", {-1: ["a"]})
        ]

        again = DeviceManager(root, clock=clock)
        await again.start()
        try:
            # Known from the checkpoint: 0 until its plugin registers again.
            assert counts(again) == (0, 0)
            assert held(again, pod) == ["a"]
            alloc = again.pod_devices.get("uid-p", "c0", R)
            assert alloc is not None and alloc.response is not None
            assert alloc.response.envs["DEVICES"] == "a"
            plugin = FakeDevicePlugin({"a": HEALTHY, "b": HEALTHY})
            await plugin.register(again.socket_dir, "p.sock", R)
            await wait_for_async(
                "counts(again) == (2, 2)",
                lambda: counts(again) == (2, 2),
                20,
                every=0.01,
                retry_on=(),
            )
            assert again.admit(gpu_pod("q", 1)) is None  # "a" stays the first pod's
            assert held(again, gpu_pod("q", 1)) == ["b"]
            await plugin.stop()
        finally:
            await again.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_response_bytes_are_the_plugins_answer() -> None:
    resp = pb.ContainerAllocateResponse.FromString(base64.b64decode(VECTORS["respA"]))
    assert resp.envs["DEV"] == "a" and resp.cdi_devices[0].name == "vendor.com/dev=a"


async def test_a_running_pod_keeps_its_devices_when_readmitted_after_a_restart() -> None:
    root = tempfile.mkdtemp(prefix="dm", dir="/tmp")
    pod = gpu_pod("p", 1)
    try:
        mgr = DeviceManager(root)
        await mgr.start()
        plugin = FakeDevicePlugin({"a": HEALTHY})
        await plugin.register(mgr.socket_dir, "p.sock", R)
        await wait_for_async(
            "counts(mgr) == (1, 1)", lambda: counts(mgr) == (1, 1), 20, every=0.01, retry_on=()
        )
        assert mgr.admit(pod) is None
        await mgr.container_options(pod, pod["spec"]["containers"][0])
        await mgr.stop()
        await plugin.stop()

        ready = False
        running = Running(pod, "c0")
        again = DeviceManager(root, running, lambda: ready)
        await again.start()
        try:
            # The plugin has not listed its devices yet: the running container
            # keeps "a" while the pod sources are not all ready...
            assert again.admit(pod) is None and held(again, pod) == ["a"]
            ready = True  # ...but a pod admitted later needs them healthy
            refused = again.admit(pod)
            assert refused is not None and "no longer healthy" in refused.message
        finally:
            await again.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Running:
    def __init__(self, pod: Pod, container: str) -> None:
        self.pod, self.container = pod, container

    def active_pod(self, pod_uid: str) -> Pod | None:
        return self.pod if pod_uid == self.pod["metadata"]["uid"] else None

    def active_pods(self) -> list[Pod]:
        return [self.pod]

    def running_containers(self, pod_uid: str) -> list[RunningContainer]:
        if pod_uid != self.pod["metadata"]["uid"]:
            return []
        return [RunningContainer(self.container, "cid")]
