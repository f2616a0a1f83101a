"""Relist kernels, native vs reference: the diff alone, and a full in-process cycle.

Each round changes 1% of the containers (running <-> exited), as a busy node would.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kubelet.container.cache import NativeCache, ReferenceCache
from kubelet.cri.api import api_pb2 as pb
from kubelet.pleg.differ import NativeRelistDiffer, ReferenceRelistDiffer

SIZES = [100, 1000, 10000]
IMPLS = {"native": NativeRelistDiffer, "reference": ReferenceRelistDiffer}
CACHES = {"native": NativeCache, "reference": ReferenceCache}


def snapshots(n: int, rounds: int = 4) -> list[tuple[bytes, bytes]]:
    """`rounds` relist responses for n pods of one container each, 1% flipping per round."""
    out = []
    states = [pb.CONTAINER_RUNNING] * n
    sb = pb.ListPodSandboxResponse(
        items=[
            pb.PodSandbox(
                id=f"{i:064x}",
                metadata=pb.PodSandboxMetadata(
                    name=f"pod-{i}", uid=f"uid-{i:08d}", namespace="default"
                ),
                state=pb.SANDBOX_READY,
                created_at=1_700_000_000_000_000_000 + i,
                labels={"io.kubernetes.pod.uid": f"uid-{i:08d}", "app": "bench"},
            )
            for i in range(n)
        ]
    ).SerializeToString()
    step = max(1, n // 100)
    for r in range(rounds):
        for i in range(r, n, 100):
            states[i] = (
                pb.CONTAINER_EXITED if states[i] == pb.CONTAINER_RUNNING else pb.CONTAINER_RUNNING
            )
        cs = pb.ListContainersResponse(
            containers=[
                pb.Container(
                    id=f"c{i:063x}",
                    pod_sandbox_id=f"{i:064x}",
                    metadata=pb.ContainerMetadata(name="app", attempt=0),
                    image=pb.ImageSpec(image="docker.io/library/busybox:1.36"),
                    image_ref="sha256:" + "ab" * 32,
                    state=states[i],
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
        out.append((sb, cs))
    _ = step
    return out


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_relist_diff(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"relist_diff_{n}"
    benchmark.extra_info["impl"] = impl
    snaps = snapshots(n)
    d = IMPLS[impl]()
    d.diff(*snaps[0])
    i = [0]

    def one() -> None:
        i[0] += 1
        d.diff(*snaps[1 + i[0] % 3])

    benchmark(one)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_relist_cycle(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """Bytes in -> events out, the cache updated for the changed pods, global time bumped."""
    benchmark.group = f"relist_cycle_{n}"
    benchmark.extra_info["impl"] = impl
    snaps = snapshots(n)
    d = IMPLS[impl]()
    cache = CACHES[impl]()
    d.diff(*snaps[0])
    i = [0]
    loop = asyncio.new_event_loop()

    def one() -> None:
        i[0] += 1
        events, changed = d.diff(*snaps[1 + i[0] % 3])
        now = time.time()
        for uid in changed:
            cache.set(uid, events, None, now)
        cache.update_time(now)

    benchmark(one)
    loop.close()
