"""The pod-resources API of a running kubelet (simulated runtime, fake machine
of two NUMA nodes with two CPUs each, static CPU manager with CPU 0 reserved,
Static memory manager), asked over its real socket with a gRPC client: List
reports the exclusive CPUs the containers run on (the sidecar's and the app's;
not the finished init container's, nor a finished pod), their memory blocks,
GetAllocatableResources the unreserved CPUs and each node's memory, Get one
pod; the 11th call of a burst is refused with ResourceExhausted; the socket is
gone once the kubelet stops."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import grpc
import pytest

from kubelet.apis.podresources.v1 import api_pb2 as pb
from kubelet.apis.podresources.v1 import api_pb2_grpc as pb_grpc
from kubelet.testing.kubelets import standalone_kubelet, write_manifest
from kubelet.testing.wait import wait_for
from kubelet.util import cpuset
from tests.integration.core.conftest import _node
from tests.integration.core.fixtures import SETTINGS

# static CPU manager with CPU 0 reserved, best-effort topology, Static memory
# manager with 100Mi reserved on node 0
from tests.unit.cm.topologies import two_numa_nodes

MiB, GiB = 1 << 20, 1 << 30
GU = {"cpu": "1", "memory": "64Mi"}


def ctr(name: str, res: dict[str, str] | None = None, **extra: object) -> dict[str, object]:
    out: dict[str, object] = {"name": name, "image": "busybox", **extra}
    if res is not None:
        out["resources"] = {"requests": res, "limits": res}
    return out


async def test_list_get_allocatable_and_rate_limit(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gen = _node(simruntime, tmp_path, machine_topology=two_numa_nodes(), **SETTINGS)
    node = await gen.__anext__()
    sock = Path(node.kubelet.root_dir) / "pod-resources" / "kubelet.sock"
    try:
        node.write(
            "gu", [ctr("c", GU)],
            initContainers=[
                ctr("setup", GU, command=["sh", "-c", "exit 0"]),
                ctr("proxy", GU, restartPolicy="Always"),
            ],
        )  # fmt: skip
        node.write("bu", [ctr("c", {"cpu": "100m"})])
        node.write("done", [ctr("c", command=["sh", "-c", "exit 0"])], restartPolicy="Never")
        for name, phase in (("gu", "Running"), ("bu", "Running"), ("done", "Succeeded")):
            await node.wait(lambda n=name, p=phase: node.phase(n) == p, 60, f"{name} {phase}")
        await node.wait(lambda: stat.S_ISSOCK(os.lstat(sock).st_mode), 30, "the socket")
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o750

        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            api = pb_grpc.PodResourcesListerStub(ch)
            await _rate_limited(node.kubelet, api)
            listed = await api.List(pb.ListPodResourcesRequest())
            by_name = {p.name: p for p in listed.pod_resources}
            assert sorted(by_name) == ["bu-node-a", "gu-node-a"]  # "done" finished
            gu = by_name["gu-node-a"]
            assert gu.namespace == "default"
            assert [c.name for c in gu.containers] == ["proxy", "c"]  # not "setup"
            pinned = {}
            for c in gu.containers:
                assert len(c.cpu_ids) == 1 and set(c.cpu_ids) <= {1, 2, 3}
                # The CPUs reported are the ones the runtime runs the container on.
                cid = node.container("gu", c.name)["containerID"].split("://")[1]
                st = (await node.rt.container_status(cid)).status
                assert cpuset.parse(st.resources.linux.cpuset_cpus) == set(c.cpu_ids)
                [block] = c.memory
                assert (block.memory_type, block.size) == ("memory", 64 * MiB)
                assert [str(n.ID) for n in block.topology.nodes] == [st.resources.linux.cpuset_mems]
                pinned[c.name] = c.cpu_ids[0]
            assert pinned["proxy"] != pinned["c"]
            [bu] = by_name["bu-node-a"].containers
            assert (list(bu.cpu_ids), list(bu.memory), list(bu.devices)) == ([], [], [])

            alloc = await api.GetAllocatableResources(pb.AllocatableResourcesRequest())
            assert list(alloc.cpu_ids) == [1, 2, 3]
            assert sorted((m.topology.nodes[0].ID, m.memory_type, m.size) for m in alloc.memory) == [
                (0, "memory", 8 * GiB - 100 * MiB), (1, "memory", 8 * GiB),
            ]  # fmt: skip
            assert list(alloc.devices) == []

            got = await api.Get(
                pb.GetPodResourcesRequest(pod_name="gu-node-a", pod_namespace="default")
            )
            assert got.pod_resources == gu
            # Get reads the pod manager: the finished pod is still answered.
            done = await api.Get(
                pb.GetPodResourcesRequest(pod_name="done-node-a", pod_namespace="default")
            )
            assert [c.name for c in done.pod_resources.containers] == ["c"]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await api.Get(
                    pb.GetPodResourcesRequest(pod_name="gu-node-a", pod_namespace="kube-system")
                )
            assert (err.value.code(), err.value.details()) == (
                grpc.StatusCode.UNKNOWN, "pod gu-node-a in namespace kube-system not found",
            )  # fmt: skip
    finally:
        await gen.aclose()
    assert not sock.exists()


async def _rate_limited(kubelet, api: pb_grpc.PodResourcesListerStub) -> None:  # type: ignore[no-untyped-def]
    """With the bucket's clock held still the burst is all there is: ten calls
    pass, the eleventh is refused as upstream refuses it."""
    limiter = kubelet.pod_resources.limiter
    real, held = limiter.clock, limiter.clock()
    limiter.clock = lambda: held
    try:
        for _ in range(10):
            await api.GetAllocatableResources(pb.AllocatableResourcesRequest())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.List(pb.ListPodResourcesRequest())
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit",
        )  # fmt: skip
    finally:
        limiter.clock = real
    # 100 tokens a second: after 0.2 s the bucket is full again (10) for what follows.
    await asyncio.sleep(0.2)


def test_kubelet_command_serves_the_socket_with_its_gates(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The kubelet command on this machine (static policy, CPU 0 reserved by
    --reserved-cpus): a Guaranteed pod of one CPU runs on an unreserved CPU
    and List says which; --feature-gates KubeletPodResourcesGet=false turns Get
    into upstream's error; the per-method counters are on /metrics."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gu"},
           "spec": {"containers": [ctr("c", GU)]}}  # fmt: skip
    write_manifest(manifests, pod)
    k = standalone_kubelet(
        tmp_path, simruntime.endpoint, manifests,
        "--cpu-manager-policy", "static", "--reserved-cpus", "0",
        "--feature-gates", "KubeletPodResourcesGet=false",
    )  # fmt: skip
    sock = k.root / "pod-resources" / "kubelet.sock"
    try:
        wait_for("gu running", lambda: k.pods()["gu-node-b"]["status"]["phase"] == "Running",
                 timeout=90, detail=k.log_tail)  # fmt: skip
        wait_for("the socket", lambda: stat.S_ISSOCK(os.lstat(sock).st_mode), timeout=30)
        online = cpuset.parse(Path("/sys/devices/system/cpu/online").read_text().strip())
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            api = pb_grpc.PodResourcesListerStub(ch)
            listed = api.List(pb.ListPodResourcesRequest())
            [gu] = [p for p in listed.pod_resources if p.name == "gu-node-b"]
            [c] = gu.containers
            assert len(c.cpu_ids) == 1 and set(c.cpu_ids) <= online - {0}
            alloc = api.GetAllocatableResources(pb.AllocatableResourcesRequest())
            assert set(alloc.cpu_ids) == online - {0}
            assert list(alloc.memory) == []  # memory manager policy None
            with pytest.raises(grpc.RpcError) as err:
                api.Get(pb.GetPodResourcesRequest(pod_name="gu-node-b", pod_namespace="default"))
            assert (err.value.code(), err.value.details()) == (  # type: ignore[attr-defined]
                grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled",
            )  # fmt: skip
        text = k.metrics()
        assert 'kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 1.0' in text
        assert 'kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1.0' in text
    finally:
        k.stop()
    assert not sock.exists()
