"""configMap, secret, downwardAPI and projected volumes (the service-account
token included) are mounted read-only in every container, whatever the
volumeMount's readOnly says (CVE-2017-1002102): the kubelet rewrites their
files, so a container that could write there could plant links for it."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from kubelet.container.mounts import make_mounts
from kubelet.volume import VolumeHost, VolumePlugin
from kubelet.volume.configmap import ConfigMapPlugin
from kubelet.volume.downwardapi import DownwardAPIPlugin
from kubelet.volume.emptydir import EmptyDirPlugin
from kubelet.volume.projected import ProjectedPlugin
from kubelet.volume.secret import SecretPlugin
from kubelet.volumemanager.manager import VolumeManagerImpl
from tests.unit.volume.test_configmap import FakeGetter
from tests.unit.volume.test_projected import Env as ProjectedEnv
from tests.unit.volume.test_projected import kube_api_access

API_VOLUMES = ["cm", "sec", "dapi", "kube-api-access-x1"]


def pod() -> dict[str, Any]:
    volumes = [
        {"name": "cm", "configMap": {"name": "app"}},
        {"name": "sec", "secret": {"secretName": "s"}},
        {
            "name": "dapi",
            "downwardAPI": {
                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
            },
        },
        kube_api_access(),
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "cm", "mountPath": "/cm", "readOnly": False},
        {"name": "sec", "mountPath": "/sec"},  # readOnly unset
        {"name": "dapi", "mountPath": "/dapi", "readOnly": False},
        {"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/sa"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "cm", "mountPath": "/k", "subPath": "k", "readOnly": False},
    ]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "labels": {"a": "b"}},
        "spec": {
            "serviceAccountName": "builder",
            "containers": [{"name": "c", "volumeMounts": mounts}],
            "volumes": volumes,
        },
    }


def plugins() -> list[VolumePlugin]:
    env = ProjectedEnv()
    secrets = FakeGetter("secret")
    secrets.objects[("ns", "s")] = {"data": {"pw": base64.b64encode(b"hunter2").decode()}}
    alloc = {"cpu": "2", "memory": "1Gi"}
    return [
        ConfigMapPlugin(env.configmaps),
        SecretPlugin(secrets),
        DownwardAPIPlugin(lambda: alloc),
        ProjectedPlugin(env.configmaps, env.secrets, env.tokens, lambda: alloc),
        EmptyDirPlugin(),
    ]


async def mounted(mgr: VolumeManagerImpl, p: dict[str, Any]) -> None:
    mgr.add_pod(p)
    for _ in range(2000):
        mgr.reconcile()
        if not mgr.unmounted_volumes(p):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"volumes not mounted: {mgr.unmounted_volumes(p)}")


def check_mounts(tmp_path: Path, mgr: VolumeManagerImpl, p: dict[str, Any]) -> None:
    vols = mgr.get_mounted_volumes("uid-1")
    assert all(vols[n].read_only for n in API_VOLUMES)
    assert not vols["scratch"].read_only
    c = p["spec"]["containers"][0]
    out = make_mounts(p, c, vols, lambda s: s, str(tmp_path / "pods" / "uid-1"))
    ro = {m.container_path: m.read_only for m in out}
    assert ro == {
        "/cm": True,
        "/sec": True,
        "/dapi": True,
        "/var/run/secrets/kubernetes.io/sa": True,
        "/scratch": False,
        "/k": True,  # a subPath of a configMap too
    }


async def test_api_volumes_are_mounted_read_only_whatever_readonly_says(tmp_path: Path) -> None:
    p = pod()
    mgr = VolumeManagerImpl(VolumeHost(str(tmp_path), "node1"), plugins())
    await mounted(mgr, p)
    check_mounts(tmp_path, mgr, p)
    # After a kubelet restart the volumes found on disk are adopted: still read-only.
    again = VolumeManagerImpl(VolumeHost(str(tmp_path), "node1"), plugins())
    await again.reconstruct()
    await mounted(again, p)
    check_mounts(tmp_path, again, p)
    await again.ops.cancel_all()
    await mgr.ops.cancel_all()
