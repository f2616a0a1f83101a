"""Container IDs from a raw ListContainersResponse, native vs reference (the
reference decodes every Container message, as the log manager used to)."""

from __future__ import annotations

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.rawlist import native_container_ids, reference_container_ids

SIZES = [1000, 10000]
IMPLS = {"native": native_container_ids, "reference": reference_container_ids}


def response(n: int) -> bytes:
    """n running containers labelled and annotated as the kubelet creates them."""
    return pb.ListContainersResponse(
        containers=[
            pb.Container(
                id=f"c{i:063x}",
                pod_sandbox_id=f"{i:064x}",
                metadata=pb.ContainerMetadata(name="app", attempt=0),
                image=pb.ImageSpec(image="docker.io/library/busybox:1.36"),
                image_ref="sha256:" + "ab" * 32,
                state=pb.CONTAINER_RUNNING,
                created_at=1_700_000_000_000_000_000 + i,
                labels={
                    "io.kubernetes.pod.uid": f"uid-{i:08d}",
                    "io.kubernetes.pod.name": f"pod-{i}",
                    "io.kubernetes.pod.namespace": "default",
                    "io.kubernetes.container.name": "app",
                },
                annotations={
                    "io.kubernetes.container.hash": "1a2b3c4d",
                    "io.kubernetes.container.restartCount": "0",
                },
            )
            for i in range(n)
        ]
    ).SerializeToString()


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_container_ids(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"container_ids_{n}"
    benchmark.extra_info["impl"] = impl
    raw = response(n)
    fn = IMPLS[impl]
    ids = benchmark(fn, raw)
    assert len(ids) == n and ids[-1] == f"c{n - 1:063x}"
