"""A pod with ResourceClaims through the runtime manager: its claims are
prepared before the sandbox, each container's CreateContainer config carries
the CDI devices of the claims (and requests) it names, and a claim that
cannot be prepared is a FailedPrepareDynamicResources event with no sandbox
made, retried on the next sync."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.cm.dra.claiminfo import ClaimInfoCache
from kubelet.cm.dra.plugin import DRAPluginManager
from kubelet.cm.resource_managers import DRASetup, ResourceManagerConfig, new_resource_managers
from kubelet.config.common import apply_defaults
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.features import FeatureGate
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.testing.draplugin import FakeDRAPlugin
from kubelet.testing.helpers import standalone_runtime_helper
from kubelet.util import cpuset
from tests.unit.cm.dra_fixtures import FakeAPI, claim
from tests.unit.cm.fixtures import Pods, machine
from tests.unit.core.helpers import RecordingRecorder

GPU = "gpu.example.com"


def claim_pod() -> Any:
    p = apply_defaults(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
         "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "gpus"}],
                  "containers": [
                      {"name": "one", "image": "busybox:1.36",
                       "resources": {"claims": [{"name": "g", "request": "first"}]}},
                      {"name": "both", "image": "busybox:1.36",
                       "resources": {"claims": [{"name": "g"}]}},
                      {"name": "none", "image": "busybox:1.36"}]}},
        "/m/p.yaml", "file", "n1",
    )  # fmt: skip
    return p


async def test_claims_are_prepared_and_their_cdi_devices_reach_create_container() -> None:
    root = tempfile.mkdtemp(prefix="drk", dir="/tmp")
    api = FakeAPI()
    rm = new_resource_managers(
        KubeletConfiguration(), ResourceManagerConfig(machine(), {}, root, cpuset.EMPTY),
        FeatureGate(), Pods(), lambda: True,
        dra=DRASetup(
            ClaimInfoCache(root), lambda health: DRAPluginManager(api.client(), "n1", health=health)
        ),
        kube_client=api.client(),
    )  # fmt: skip
    assert rm.dra is not None
    gpu = FakeDRAPlugin(
        GPU, {"gpus": [(["first"], [f"{GPU}/gpu=0"]), (["second"], [f"{GPU}/gpu=1"])]}
    )
    await gpu.start(os.path.join(root, "reg"), os.path.join(root, "g.sock"))
    await rm.dra.plugins.register_plugin(GPU, os.path.join(root, "g.sock"), ["v1.DRAPlugin"], None)
    rt, events = FakeRuntimeService(), RecordingRecorder()
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]), standalone_runtime_helper(root),
                       root, container_resources=rm, recorder=events)  # fmt: skip
    try:
        pod = claim_pod()
        u = pod["metadata"]["uid"]
        # Not reserved for the pod yet (the scheduler has not got to it).
        api.claims["gpus"] = claim("gpus", [(GPU, "first"), (GPU, "second")], [])
        res = await m.sync_pod(pod, await m.get_pod_status(u))
        assert not res.ok and rt.called("run_pod_sandbox") == []
        [(_, etype, reason, msg)] = events.events
        assert (etype, reason) == ("Warning", "FailedPrepareDynamicResources")
        assert msg == (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            f"pod p-n1 ({u}) is not allowed to use ResourceClaim gpus (uid-gpus)"
        )
        api.claims["gpus"] = claim("gpus", [(GPU, "first"), (GPU, "second")], [u])
        assert (await m.sync_pod(pod, await m.get_pod_status(u))).ok
        assert gpu.prepared == [["gpus"]]
        cdi = {cfg.metadata.name: [d.name for d in cfg.CDI_devices]
               for _, cfg, _ in rt.called("create_container")}  # fmt: skip
        assert cdi == {
            "one": [f"{GPU}/gpu=0"],
            "both": [f"{GPU}/gpu=0", f"{GPU}/gpu=1"],
            "none": [],
        }
    finally:
        await gpu.stop()
        await rm.dra.plugins.close()
        shutil.rmtree(root, ignore_errors=True)
