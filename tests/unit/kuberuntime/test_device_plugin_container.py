"""A container given devices by a device plugin: the runtime manager's
CreateContainer config carries the plugin's Allocate answer (envs, mounts,
devices, annotations, CDI devices), and a plugin that fails Allocate fails the
start with CreateContainerConfigError (the pod's other work goes on)."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.devicemanager import HEALTHY
from kubelet.cm.resource_managers import ResourceManagerConfig, new_resource_managers
from kubelet.config.common import apply_defaults
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.features import FeatureGate
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.testing.deviceplugin import FakeDevicePlugin
from kubelet.testing.helpers import standalone_runtime_helper
from kubelet.testing.wait import wait_for_async
from kubelet.util import cpuset
from tests.unit.cm.fixtures import Pods, counts, machine

R = "example.com/gpu"


def device_pod() -> Any:
    lim = {R: "1"}
    return apply_defaults(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                  "env": [{"name": "MINE", "value": "1"}],
                                  "resources": {"limits": lim, "requests": lim}}]}},
        "/m/p.yaml", "file", "n1",
    )  # fmt: skip


async def start(fail: str | None) -> tuple[Any, RuntimeManager, FakeRuntimeService, Any, str]:
    root = tempfile.mkdtemp(prefix="dk", dir="/tmp")
    rm = new_resource_managers(
        KubeletConfiguration(),
        ResourceManagerConfig(machine(), {}, root, cpuset.EMPTY),
        FeatureGate(),
        Pods(),
        lambda: True,
    )
    await rm.devices.start()
    plugin = FakeDevicePlugin({"d0": HEALTHY}, fail=lambda m: fail if m == "Allocate" else None)
    await plugin.register(rm.devices.socket_dir, "p.sock", R)
    await wait_for_async(
        "counts(rm.devices, R) == (1, 1)",
        lambda: counts(rm.devices, R) == (1, 1),
        20,
        every=0.01,
        retry_on=(),
    )
    rt = FakeRuntimeService()
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]), standalone_runtime_helper(root),
                       root, container_resources=rm)  # fmt: skip
    return rm, m, rt, plugin, root


async def test_the_allocate_answer_reaches_create_container() -> None:
    rm, m, rt, plugin, root = await start(None)
    try:
        pod = device_pod()
        assert rm.admit(pod) is None
        assert (await m.sync_pod(pod, await m.get_pod_status(pod["metadata"]["uid"]))).ok
        [(_, cfg, _)] = rt.called("create_container")
        envs = [(e.key, e.value) for e in cfg.envs]
        assert envs[0] == ("DEVICES", "d0") and ("MINE", "1") in envs
        first = cfg.mounts[0]
        assert (first.container_path, first.host_path) == ("/dev-data/d0", "/tmp/dev-d0")
        assert [(d.container_path, d.host_path) for d in cfg.devices] == [
            ("/dev/faked0", "/dev/null")
        ]
        assert cfg.annotations["fake.example.com/devices"] == "d0"
        assert [d.name for d in cfg.CDI_devices] == ["fake.example.com/dev=d0"]
    finally:
        await plugin.stop()
        await rm.devices.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_a_failing_allocate_is_a_container_config_error() -> None:
    rm, m, rt, plugin, root = await start("out of order")
    try:
        pod = device_pod()
        assert rm.admit(pod) is None
        result = await m.sync_pod(pod, await m.get_pod_status(pod["metadata"]["uid"]))
        assert not result.ok
        assert rt.called("create_container") == []
        waiting = m.reporter.waiting_of(pod)
        reason, message = waiting["c"]
        assert reason == "CreateContainerConfigError"
        assert "out of order" in message
    finally:
        await plugin.stop()
        await rm.devices.stop()
        shutil.rmtree(root, ignore_errors=True)
