"""Node registration, status and Lease against a real kube-apiserver (Node,RBAC,
NodeRestriction)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient
from kubelet.kubelet_node_status import NodeStatusManager
from kubelet.nodelease import NodeLeaseController
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs
from kubelet.testing.controlplane import ControlPlane
from kubelet.util.node_startup_latency import NodeStartupLatencyTracker

pytestmark = pytest.mark.cluster


def inputs(name: str, ready: list[str | None]) -> NodeInputs:
    cfg = KubeletConfiguration()
    cfg.max_pods = 250
    cfg.kube_reserved = {"cpu": "100m", "memory": "100Mi"}
    cfg.register_with_taints = [{"key": "dedicated", "value": "py", "effect": "NoSchedule"}]
    cfg.node_status_update_frequency = 0.2
    cfg.node_status_report_frequency = 300
    return NodeInputs(
        name=name,
        config=cfg,
        machine=machine_info(),
        kubelet_version="v1.34.4",
        node_ips=["127.0.0.1"],
        node_labels={"example.com/pool": "a"},
        runtime_version=lambda: "simruntime://0.1.0",
        readiness_checks=[lambda: ready[0]],
        rootfs_capacity=lambda: 100 * 1024**3,
        runtime_features=lambda: {"supplementalGroupsPolicy": True},
    )


async def test_node_registers_reports_ready_and_renews_lease(control_plane: ControlPlane) -> None:
    name = "py-node-1"
    conn = load_kubeconfig(control_plane.node_kubeconfig(name))
    client = APIClient(conn, qps=50, burst=100)
    heartbeat = APIClient(conn, qps=0, burst=1, timeout=10)
    ready: list[str | None] = [None]
    # Start-up durations: only a Node this kubelet created is timed.
    startup = NodeStartupLatencyTracker(None, time.time())
    mgr = NodeStatusManager(client, inputs(name, ready), startup=startup)
    lease = NodeLeaseController(
        heartbeat, name, 40, node_uid=lambda: (mgr.node or {}).get("metadata", {}).get("uid")
    )
    stop = asyncio.Event()
    try:
        await mgr.register()
        assert startup.registered_new is not None and startup.ready is None
        await lease.renew()
        first_renew = lease.lease["spec"]["renewTime"]  # type: ignore[index]
        await asyncio.sleep(0.01)
        await lease.renew()
        assert lease.lease["spec"]["renewTime"] != first_renew  # type: ignore[index]

        # kubectl, as a user would, sees the node Ready with the right capacity
        out = control_plane.kubectl("get", "node", name, "-o", "json").stdout
        node = json.loads(out)
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert node["metadata"]["labels"]["example.com/pool"] == "a"
        # ours, beside the not-ready taint the API server adds at creation
        assert {"key": "dedicated", "value": "py", "effect": "NoSchedule"} in node["spec"]["taints"]
        assert node["status"]["capacity"]["pods"] == "250"
        cond = {c["type"]: c for c in node["status"]["conditions"]}
        assert cond["Ready"]["status"] == "True"
        assert cond["MemoryPressure"]["status"] == "False"
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "simruntime://0.1.0"
        # the runtime's features, as the NodeFeatures setter reports them
        assert node["status"]["features"] == {"supplementalGroupsPolicy": True}
        # allocatable = capacity - 100m cpu reserved
        cores = int(node["status"]["capacity"]["cpu"])
        assert node["status"]["allocatable"]["cpu"] == f"{cores * 1000 - 100}m"

        lease_obj = json.loads(
            control_plane.kubectl(
                "-n", "kube-node-lease", "get", "lease", name, "-o", "json"
            ).stdout
        )
        assert lease_obj["spec"]["holderIdentity"] == name
        assert lease_obj["metadata"]["ownerReferences"][0]["kind"] == "Node"

        # an unchanged status is not patched again before the report period
        patches = mgr.patches
        assert await mgr.sync_once() is False
        assert mgr.patches == patches
        # a runtime failure flips Ready to False with the reason, in one patch
        ready[0] = "container runtime is down"
        assert await mgr.sync_once() is True
        node = json.loads(control_plane.kubectl("get", "node", name, "-o", "json").stdout)
        cond = {c["type"]: c for c in node["status"]["conditions"]}
        assert cond["Ready"]["status"] == "False"
        assert cond["Ready"]["message"] == "container runtime is down"
        assert startup.ready is None  # no patch has answered Ready yet
        ready[0] = None
        assert await mgr.sync_once() is True
        assert startup.ready is not None and startup.ready >= startup.registered_new

        # a restarted kubelet adopts the existing Node
        again = NodeStartupLatencyTracker(None, time.time())
        mgr2 = NodeStatusManager(client, inputs(name, [None]), startup=again)
        await mgr2.register()
        assert mgr2.node["metadata"]["uid"] == node["metadata"]["uid"]  # type: ignore[index]
        # Adopted (its status patched Ready): not a new node's start-up.
        assert again.first_attempt is not None
        assert again.registered_new is None and again.ready is None
    finally:
        stop.set()
        await client.close()
        await heartbeat.close()


async def test_node_cannot_touch_another_node(control_plane: ControlPlane) -> None:
    conn = load_kubeconfig(control_plane.node_kubeconfig("py-node-2"))
    client = APIClient(conn, qps=50, burst=100)
    try:
        with pytest.raises(Exception, match="403"):
            await client.get("/api/v1/nodes/py-node-1")
    finally:
        await client.close()
