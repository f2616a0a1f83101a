"""The pod list+watch a node does (fieldSelector spec.nodeName), against the API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient
from kubelet.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


def pod(name: str, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        }
    )


def kubectl_apply(cp: ControlPlane, manifest: str) -> None:
    import subprocess

    from kubelet.testing.controlplane import find_binaries

    subprocess.run(
        [find_binaries()["kubectl"], f"--kubeconfig={cp.admin_kubeconfig}", "create", "-f", "-"],
        input=manifest,
        text=True,
        check=True,
        capture_output=True,
    )


async def test_list_watch_sees_only_this_nodes_pods(
    control_plane: ControlPlane,
) -> None:
    node = "py-node-watch"
    client = APIClient(load_kubeconfig(control_plane.node_kubeconfig(node)), qps=50, burst=100)
    kubectl_apply(control_plane, pod("before", node))
    listed: list[list[str]] = []
    events: list[tuple[str, str]] = []

    async def on_list(items: list[dict[str, Any]]) -> None:
        listed.append(sorted(p["metadata"]["name"] for p in items))

    async def on_event(etype: str, obj: dict[str, Any]) -> None:
        events.append((etype, obj["metadata"]["name"]))

    r = Reflector(
        client,
        "/api/v1/pods",
        {"fieldSelector": f"spec.nodeName={node}"},
        on_list,
        on_event,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    try:
        await asyncio.wait_for(r.synced.wait(), 30)
        assert listed == [["before"]]
        kubectl_apply(control_plane, pod("other-node-pod", "somewhere-else"))
        kubectl_apply(control_plane, pod("after", node))
        for _ in range(200):
            if ("ADDED", "after") in events:
                break
            await asyncio.sleep(0.05)
        assert ("ADDED", "after") in events
        assert all(name != "other-node-pod" for _, name in events)
        control_plane.kubectl("delete", "pod", "after", "--wait=false")
        for _ in range(200):
            if any(name == "after" and t in ("MODIFIED", "DELETED") for t, name in events[1:]):
                break
            await asyncio.sleep(0.05)
        assert any(name == "after" and t != "ADDED" for t, name in events)
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
