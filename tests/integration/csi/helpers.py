"""What the storage integration tests share: a fake API holding claims and
PVs (get, and merge patches of a claim's status), and the devices a
container config gets from the simulated runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kubelet.apis.config.loader import merge_patch
from kubelet.client.rest import APIError
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import CRIError
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
from kubelet.testing import csi as parts
from kubelet.testing.process import short_dir
from kubelet.testing.simruntime import start_simruntime

DRIVER = parts.DRIVER_NAME


class FakeAPI:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    async def get(self, path: str) -> Any:
        if path not in self.objects:
            raise APIError(404, "NotFound", f"{path} not found")
        return self.objects[path]

    async def patch(self, path: str, body: Any, **kw: Any) -> Any:
        """A merge patch (status only here): null removes a key."""
        key = path.removesuffix("/status")
        self.objects[key] = merge_patch(self.objects[key], body)
        return self.objects[key]

    def resize(self, claim: str, pv: str, size: str) -> None:
        """What the resizer leaves once ControllerExpandVolume is done: the
        PV at the new size, the claim's node part pending."""
        self.objects[f"/api/v1/persistentvolumes/{pv}"]["spec"]["capacity"] = {"storage": size}
        status = self.objects[f"/api/v1/namespaces/ns/persistentvolumeclaims/{claim}"]["status"]
        status["allocatedResources"] = {"storage": size}
        status["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}

    def bind(self, claim: str, pv: str, handle: str, volume_mode: str = "Filesystem") -> None:
        self.objects[f"/api/v1/namespaces/ns/persistentvolumeclaims/{claim}"] = {
            "metadata": {"name": claim, "namespace": "ns", "uid": f"uid-{claim}"},
            "spec": {"volumeName": pv},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
        }
        self.objects[f"/api/v1/persistentvolumes/{pv}"] = {
            "metadata": {"name": pv},
            "spec": {
                "claimRef": {"namespace": "ns", "name": claim, "uid": f"uid-{claim}"},
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "volumeMode": volume_mode,
                "csi": {"driver": DRIVER, "volumeHandle": handle},
            },
        }


async def created_devices(tmp_path: Path, cfg: pb.ContainerConfig) -> list[dict[str, str]]:
    sim_dir = short_dir("simblk")
    sim = start_simruntime(sim_dir)
    rt = RemoteRuntimeService(sim.endpoint, timeout=10)
    img = RemoteImageService(sim.endpoint, timeout=10)
    try:
        await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
        sb = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="p", uid="b1", namespace="ns"),
            log_directory=str(tmp_path / "logs"),
        )
        sid = await rt.run_pod_sandbox(sb)
        cid = await rt.create_container(sid, cfg, sb)
        info = json.loads((await rt.container_status(cid, verbose=True)).info["info"])
        devices: list[dict[str, str]] = info["config"]["devices"]
        # A host path that is not a device node is refused, as runc does.
        bad = pb.ContainerConfig()
        bad.CopyFrom(cfg)
        bad.metadata.name = "bad"
        bad.devices[0].host_path = str(tmp_path)
        with pytest.raises(CRIError, match="not a device node"):
            await rt.create_container(sid, bad, sb)
        return devices
    finally:
        await rt.close()
        await img.close()
        sim.stop()
        shutil.rmtree(sim_dir, ignore_errors=True)
