"""A CSI volume end to end on a real one-node cluster: kube-apiserver,
kube-controller-manager with the storage controllers (PV binder,
attach-detach, ephemeral volumes), containerd with runc, our kubelet, and
the CSI parts deployed as a pod (hack/parts/csi.sh): the project's
csi-hostpath driver and registrar, external-provisioner and
external-attacher. The driver requires attach, so the whole chain runs:
registration -> CSINode; PVC -> CreateVolume; pod -> VolumeAttachment ->
ControllerPublish; volumesInUse -> NodeStage -> NodePublish; the data a pod
wrote is there for the next pod; deleting the pod unpublishes, unstages and
lets the controller detach."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.testing import csi as parts
from kubelet.testing import csi_deploy
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import STORAGE_CONTROLLERS, ControlPlane, Unavailable
from kubelet.testing.kubelets import KubeletProcess, cluster_kubelet
from kubelet.testing.parts import starting, tail_of
from kubelet.testing.wait import wait_for
from kubelet.util import mountutil

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-csi-node"


class Env:
    def __init__(self, cp: ControlPlane, k: KubeletProcess, root: Path, state: Path) -> None:
        self.cp, self.k, self.root, self.state = cp, k, root, state

    def json(self, *args: str) -> Any:
        return json.loads(self.cp.kubectl(*args, "-o", "json").stdout)

    def apply(self, *objects: dict[str, Any]) -> None:
        csi_deploy.apply(self.cp.kubectl, list(objects))


@pytest.fixture(scope="module")
def env(containerd: Containerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with starting("CSI test parts", parts.Unavailable):
        for name in csi_deploy.SIDECARS:
            parts.binary(name)
    cp_dir = tmp_path_factory.mktemp("csi-cp")
    with starting("control plane", Unavailable, log_tail=lambda: tail_of(cp_dir / "logs")):
        cp = ControlPlane(
            str(cp_dir), controllers=True, extra_controllers=STORAGE_CONTROLLERS
        ).start()
    # Short: the registration and driver sockets live under the root dir.
    tmp = Path(tempfile.mkdtemp(prefix="kpycsi-", dir="/tmp"))
    k = cluster_kubelet(cp, tmp, containerd.endpoint, NODE, config={"cgroupsPerQOS": True})
    e = Env(cp, k, tmp / "root", tmp / "csi-state")
    try:
        wait_for("the node to be Ready", lambda: _ready(e), timeout=120)
        tar = csi_deploy.build_image(str(tmp / "csi-parts.tar"))
        csi_deploy.import_image(containerd.ctr, tar)
        dep = csi_deploy.Deployment(
            NODE, str(e.root), str(e.state), cp.admin_kubeconfig, attach_required=True
        )
        e.apply(*dep.manifests())
        wait_for("the driver to register", lambda: csi_deploy.registered(cp.kubectl, NODE), 180)
        yield e
    finally:
        cp.kubectl("delete", "pods", "--all", "-n", "default", "--wait=false", check=False)
        cp.kubectl("delete", "pvc", "--all", "-n", "default", "--wait=false", check=False)
        k.stop()
        cp.stop()
        kept = shutil.copy(k.log, cp_dir / "kubelet.log")  # tmp goes: keep the log
        print(f"kubelet log: {kept}")
        parts.unmount_all_under(str(tmp))
        shutil.rmtree(tmp, ignore_errors=True)


def _ready(e: Env) -> bool:
    if e.k.proc.poll() is not None:
        raise RuntimeError(f"kubelet exited: {e.k.log.read_text()[-3000:]}")
    conds = e.json("get", "node", NODE)["status"]["conditions"]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def pvc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": csi_deploy.STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def pod(name: str, claim: str, command: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", command],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            **spec,
        },
    }


def phase(e: Env, name: str) -> str:
    return str(e.json("get", "pod", name, "-n", "default")["status"].get("phase", ""))


def gone(e: Env, *args: str) -> bool:
    return e.cp.kubectl("get", *args, check=False).returncode != 0


def mounted(path: Path) -> bool:
    return str(path) in mountutil.mount_table()


def test_driver_registration_writes_the_node_info(env: Env) -> None:
    entry = csi_deploy.registered(env.cp.kubectl, NODE)
    assert entry is not None
    assert entry["nodeID"] == NODE
    assert entry["topologyKeys"] == [parts.TOPOLOGY_KEY]
    node = env.json("get", "node", NODE)
    assert node["metadata"]["labels"][parts.TOPOLOGY_KEY] == NODE
    ids = json.loads(node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"])
    assert ids == {parts.DRIVER_NAME: NODE}
    csinode = env.json("get", "csinode", NODE)
    assert csinode["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_provisioned_volume_outlives_its_pod_and_is_unmounted_on_delete(env: Env) -> None:
    env.apply(pvc("data"))
    claim = wait_for(
        "the claim to be bound",
        lambda: (
            (c := env.json("get", "pvc", "data", "-n", "default"))["status"].get("phase") == "Bound"
            and c
        ),
        timeout=120,
    )
    pv_name = claim["spec"]["volumeName"]
    handle = env.json("get", "pv", pv_name)["spec"]["csi"]["volumeHandle"]
    unique = f"kubernetes.io/csi/{parts.DRIVER_NAME}^{handle}"

    env.apply(pod("writer", "data", "echo hello > /data/f && sleep 3600"))
    wait_for("the writer to run", lambda: phase(env, "writer") == "Running", timeout=180)
    uid = env.json("get", "pod", "writer", "-n", "default")["metadata"]["uid"]
    r = env.cp.kubectl("exec", "writer", "-n", "default", "--", "cat", "/data/f")
    assert r.stdout == "hello\n"
    node = env.json("get", "node", NODE)
    assert unique in node["status"]["volumesInUse"]
    assert unique in [v["name"] for v in node["status"].get("volumesAttached") or []]
    va_name = "csi-" + hashlib.sha256(f"{handle}{parts.DRIVER_NAME}{NODE}".encode()).hexdigest()
    assert env.json("get", "volumeattachment", va_name)["status"]["attached"] is True
    digest = hashlib.sha256(handle.encode()).hexdigest()
    staging = env.root / "plugins/kubernetes.io/csi" / parts.DRIVER_NAME / digest
    target = env.root / "pods" / uid / "volumes/kubernetes.io~csi" / pv_name / "mount"
    assert mounted(staging / "globalmount") and mounted(target)
    assert (env.state / "volumes" / handle / "f").read_text() == "hello\n"

    env.cp.kubectl("delete", "pod", "writer", "-n", "default", "--wait=true", "--timeout=50s")
    # As upstream, the pod object goes only once its volumes are torn down: a
    # ReadWriteOncePod claim, or the attachment, is free when it is gone.
    assert not target.parent.exists()
    assert not staging.exists()
    wait_for(
        "volumesInUse to be empty",
        lambda: unique not in (env.json("get", "node", NODE)["status"].get("volumesInUse") or []),
        timeout=60,
    )
    wait_for("the controller to detach", lambda: gone(env, "volumeattachment", va_name), 120)

    env.apply(pod("reader", "data", "cat /data/f"))
    wait_for("the reader to finish", lambda: phase(env, "reader") == "Succeeded", timeout=180)
    logs = env.cp.kubectl("logs", "reader", "-n", "default").stdout
    assert logs == "hello\n"
    env.cp.kubectl("delete", "pod", "reader", "-n", "default", "--wait=true", "--timeout=50s")
    env.cp.kubectl("delete", "pvc", "data", "-n", "default", "--wait=true", "--timeout=50s")
    wait_for("the PV to be deleted", lambda: gone(env, "pv", pv_name), timeout=120)
    wait_for(
        "the driver to delete the volume",
        lambda: not (env.state / "volumes" / handle).exists(),
        timeout=60,
    )
    assert os.listdir(env.root / "plugins/kubernetes.io/csi" / parts.DRIVER_NAME) == []


def test_generic_ephemeral_and_inline_volumes(env: Env) -> None:
    """The claim the ephemeral-volume controller makes from the pod's template
    is provisioned, mounted, and goes with the pod; an inline CSI volume is the
    pod's own (published, never staged) and goes with it too."""
    p = pod("eph", "unused", "echo x > /data/f && echo y > /inline/f && sleep 3600")
    p["spec"]["volumes"] = [
        {
            "name": "data",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": csi_deploy.STORAGE_CLASS,
                        "resources": {"requests": {"storage": "1Mi"}},
                    }
                }
            },
        },
        {"name": "inline", "csi": {"driver": parts.DRIVER_NAME}},
    ]
    p["spec"]["containers"][0]["volumeMounts"].append({"name": "inline", "mountPath": "/inline"})
    env.apply(p)
    wait_for("the pod to run", lambda: phase(env, "eph") == "Running", timeout=240)
    claim = env.json("get", "pvc", "eph-data", "-n", "default")
    assert claim["metadata"]["ownerReferences"][0]["name"] == "eph"
    uid = env.json("get", "pod", "eph", "-n", "default")["metadata"]["uid"]
    inline = env.root / "pods" / uid / "volumes/kubernetes.io~csi/inline"
    assert mounted(inline / "mount")
    assert json.loads((inline / "vol_data.json").read_text())["volumeLifecycleMode"] == "Ephemeral"
    env.cp.kubectl("delete", "pod", "eph", "-n", "default", "--wait=true", "--timeout=50s")
    assert not inline.exists()
    wait_for(
        "the claim to be collected", lambda: gone(env, "pvc", "eph-data", "-n", "default"), 120
    )


def _bound_block_claim(env: Env, name: str) -> dict[str, Any]:
    """A 4Mi Block claim of that name, once bound."""
    claim_obj = pvc(name)
    claim_obj["spec"]["volumeMode"] = "Block"
    claim_obj["spec"]["resources"]["requests"]["storage"] = "4Mi"
    env.apply(claim_obj)
    claim: dict[str, Any] = wait_for(
        "the block claim to be bound",
        lambda: (
            (c := env.json("get", "pvc", name, "-n", "default"))["status"].get("phase") == "Bound"
            and c
        ),
        timeout=120,
    )
    return claim


def _block_pod(name: str, script: str) -> dict[str, Any]:
    """A pod running script with the claim of its name at /dev/xvda (volumeDevices)."""
    p = pod(name, name, script)
    del p["spec"]["containers"][0]["volumeMounts"]
    p["spec"]["containers"][0]["volumeDevices"] = [{"name": "data", "devicePath": "/dev/xvda"}]
    return p


def test_block_volume_is_a_device_in_the_container(env: Env) -> None:
    """A Block claim through volumeDevices: the container (runc) sees a block
    device at devicePath of the claim's size, and what it writes there is in
    the driver's backing file; deleting the pod unpublishes, unstages and
    detaches the loop device, deleting the claim removes the volume."""
    claim = _bound_block_claim(env, "blk")
    pv_name = claim["spec"]["volumeName"]
    handle = env.json("get", "pv", pv_name)["spec"]["csi"]["volumeHandle"]
    script = (
        "test -b /dev/xvda && blockdev --getsize64 /dev/xvda && "
        "echo blockdata | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null && "
        "echo written && sleep 3600"
    )
    env.apply(_block_pod("blk", script))
    wait_for("the block pod to run", lambda: phase(env, "blk") == "Running", timeout=180)
    wait_for(
        "the pod to write",
        lambda: "written" in env.cp.kubectl("logs", "blk", "-n", "default").stdout,
        timeout=60,
    )
    assert env.cp.kubectl("logs", "blk", "-n", "default").stdout == f"{4 << 20}\nwritten\n"
    r = env.cp.kubectl("exec", "blk", "-n", "default", "--", "test", "-b", "/dev/xvda", check=False)
    assert r.returncode == 0
    uid = env.json("get", "pod", "blk", "-n", "default")["metadata"]["uid"]
    base = env.root / "plugins/kubernetes.io/csi/volumeDevices"
    publish = base / "publish" / pv_name / uid
    assert os.path.exists(publish) and mounted(publish)
    assert (base / "staging" / pv_name).is_dir()
    backing = env.state / "volumes" / handle / "disk.img"
    with open(backing, "rb") as fh:
        assert fh.read(10) == b"blockdata\n"
    assert len(parts.loop_devices_under(str(env.state))) == 1

    env.cp.kubectl("delete", "pod", "blk", "-n", "default", "--wait=true", "--timeout=50s")
    assert not os.path.lexists(publish)
    assert not (base / "staging" / pv_name).exists() and not (base / pv_name).exists()
    assert parts.loop_devices_under(str(env.state)) == []
    env.cp.kubectl("delete", "pvc", "blk", "-n", "default", "--wait=true", "--timeout=50s")
    wait_for("the PV to be deleted", lambda: gone(env, "pv", pv_name), timeout=120)
    wait_for("the driver to delete the volume", lambda: not backing.parent.exists(), timeout=60)


def _block_size(e: Env, pod_name: str) -> int:
    r = e.cp.kubectl(
        "exec", pod_name, "-n", "default", "--", "blockdev", "--getsize64", "/dev/xvda"
    )
    return int(r.stdout)


def test_block_volume_grows_in_the_running_container(env: Env) -> None:
    """Expansion of a raw block volume in use on a real cluster: the claim's
    request is raised, the resizer (the project's stand-in for
    external-resizer) calls ControllerExpandVolume, grows the PV and leaves
    the claim's allocated size with its node part pending. Our kubelet then
    calls NodeExpandVolume on the published device (the driver grows its loop
    device), the runc container sees the new size on the same device, and the
    kubelet (as the node, through the Node authorizer) records the size in
    the claim's status and clears the pending state and conditions."""
    claim = _bound_block_claim(env, "grow")
    pv_name = claim["spec"]["volumeName"]
    env.apply(_block_pod("grow", "sleep 3600"))
    wait_for("the block pod to run", lambda: phase(env, "grow") == "Running", timeout=180)
    assert _block_size(env, "grow") == 4 << 20

    env.cp.kubectl(
        "patch", "pvc", "grow", "-n", "default", "--type=merge",
        "-p", json.dumps({"spec": {"resources": {"requests": {"storage": "8Mi"}}}}),
    )  # fmt: skip
    wait_for(
        "the resizer to grow the PV",
        lambda: env.json("get", "pv", pv_name)["spec"]["capacity"]["storage"] == "8Mi",
        timeout=60,
    )
    # The kubelet checks on the volume's next remount (every minute, with jitter).
    status = wait_for(
        "the claim at its new size",
        lambda: (
            (s := env.json("get", "pvc", "grow", "-n", "default")["status"])["capacity"]["storage"]
            == "8Mi"
            and s
        ),
        timeout=150,
    )
    assert not status.get("allocatedResourceStatuses")
    assert status["allocatedResources"]["storage"] == "8Mi"
    assert not status.get("conditions")
    assert _block_size(env, "grow") == 8 << 20
    events = env.json(
        "get", "events", "-n", "default", "--field-selector", "involvedObject.name=grow"
    )["items"]
    assert {(e["involvedObject"]["kind"], e["reason"]) for e in events} >= {
        ("PersistentVolumeClaim", "Resizing"),
        ("PersistentVolumeClaim", "FileSystemResizeRequired"),
        ("Pod", "FileSystemResizeSuccessful"),
        ("PersistentVolumeClaim", "FileSystemResizeSuccessful"),
    }
    env.cp.kubectl("delete", "pod", "grow", "-n", "default", "--wait=true", "--timeout=50s")
    assert parts.loop_devices_under(str(env.state)) == []
    env.cp.kubectl("delete", "pvc", "grow", "-n", "default", "--wait=true", "--timeout=50s")
    wait_for("the PV to be deleted", lambda: gone(env, "pv", pv_name), timeout=120)
