"""The pod-resources socket: where it is, its directory's mode, a stale socket
replaced, v1 and v1alpha1 answered on it, upstream's gRPC codes for a disabled
Get and for calls over the rate limit, and the socket gone once stopped."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import grpc
import pytest

from kubelet import metrics
from kubelet.apis.podresources.server import PodResourcesServer, TokenBucket, socket_path
from kubelet.apis.podresources.server_v1 import Gates
from kubelet.apis.podresources.v1 import api_pb2 as pb
from kubelet.apis.podresources.v1 import api_pb2_grpc as pb_grpc
from kubelet.apis.podresources.v1alpha1 import api_pb2 as alpha
from kubelet.apis.podresources.v1alpha1 import api_pb2_grpc as alpha_grpc
from tests.unit.podresources.fixtures import providers


async def test_serves_v1_and_v1alpha1_with_upstreams_errors_and_limit(tmp_path: Path) -> None:
    root = tmp_path / "r"
    path = socket_path(str(root))
    assert path == str(root / "pod-resources" / "kubelet.sock")
    os.makedirs(os.path.dirname(path), 0o750)
    Path(path).write_text("left by a previous run")
    # A frozen clock: the burst of 10 is all there is.
    server = PodResourcesServer(
        str(root), providers(), Gates(get=False), TokenBucket(100, 10, lambda: 0.0)
    )
    before = dict(metrics.POD_RESOURCES.counts)
    stop = asyncio.Event()
    task = asyncio.create_task(server.run(stop))
    try:
        for _ in range(200):
            if os.path.exists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
                break
            await asyncio.sleep(0.05)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o750
        assert os.listdir(os.path.dirname(path)) == ["kubelet.sock"]  # no temporary name left
        async with grpc.aio.insecure_channel("unix://" + path) as ch:
            v1 = pb_grpc.PodResourcesListerStub(ch)
            listed = await v1.List(pb.ListPodResourcesRequest())
            assert [p.name for p in listed.pod_resources] == ["web"]
            alloc = await v1.GetAllocatableResources(pb.AllocatableResourcesRequest())
            assert list(alloc.cpu_ids) == [1, 2, 3]
            old = await alpha_grpc.PodResourcesListerStub(ch).List(alpha.ListPodResourcesRequest())
            assert [p.name for p in old.pod_resources] == ["web", "job"]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await v1.Get(pb.GetPodResourcesRequest(pod_name="web", pod_namespace="ns"))
            assert (err.value.code(), err.value.details()) == (
                grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled",
            )  # fmt: skip
            # Four calls so far; six more fit in the burst, the next is refused.
            for _ in range(6):
                await v1.List(pb.ListPodResourcesRequest())
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await v1.List(pb.ListPodResourcesRequest())
            assert (err.value.code(), err.value.details()) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit",
            )  # fmt: skip
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert not os.path.exists(path)
    counts = metrics.POD_RESOURCES.counts
    for metric, calls in (
        ("kubelet_pod_resources_endpoint_requests_list", 7),  # the refused one never ran
        ("kubelet_pod_resources_endpoint_requests_get_allocatable", 1),
        ("kubelet_pod_resources_endpoint_requests_get", 1),
        ("kubelet_pod_resources_endpoint_errors_get", 1),
    ):
        key = (metric, "v1")
        assert counts.get(key, 0) - before.get(key, 0) == calls, metric


async def test_a_socket_that_cannot_be_bound_is_an_error_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "r"
    os.makedirs(root / "pod-resources" / "kubelet.sock")  # a directory in the way
    server = PodResourcesServer(str(root), providers(), Gates())
    await asyncio.wait_for(server.run(asyncio.Event()), 30)  # returns: nothing served
    assert "Failed to serve the podresources API" in caplog.text
